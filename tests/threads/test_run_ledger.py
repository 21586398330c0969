"""The run event ledger (000 `RunLedger`, `SnapshotAccumulator`): a run publishes its events, a
subscriber follows them in order over Server-Sent Events, the latest snapshot is kept."""

from __future__ import annotations

import json
from typing import Any

import pytest

from governance.models import AuditRecord
from memoryapp.models import RunEvent, Thread, ThreadRun
from tests.kit.api import Caller, answered, content_of, error_of, get_ok, post_ok, post_thread
from tests.kit.crypto import encrypted

__all__ = ["encrypted"]  # the fixture, for the test of sealing

SNAP_1 = {"runId": "r", "sessionId": "s", "phase": "streaming", "messages": [], "pending": [], "model": "m"}
SNAP_2 = {**SNAP_1, "phase": "dispatching", "pending": [{"id": "c1", "name": "search", "stage": "running"}]}
SNAP_END = {**SNAP_1, "phase": "settled", "messages": [{"role": "assistant", "content": "Lisbon it is."}]}


def started(caller: Caller, thread_id: str = "t-run") -> str:
    post_thread(caller, thread_id, user_id="u-ana")
    return str(post_ok(caller.client, f"/api/v1/threads/{thread_id}/runs", {})["id"])


def events_url(run_id: str, thread_id: str = "t-run") -> str:
    return f"/api/v1/threads/{thread_id}/runs/{run_id}/events"


def publish(caller: Caller, run_id: str, *events: dict[str, Any], status: int = 201) -> Any:
    return post_ok(caller.client, events_url(run_id), {"events": list(events)}, status=status)


def frames(
    caller: Caller, run_id: str, *, after: str | None = None, query: str = "max_seconds=0.3"
) -> list[tuple[str | None, str, Any]]:
    """The stream read whole (it ends at settled / faulted, else after max_seconds): (id, event, data)."""
    headers = {"HTTP_LAST_EVENT_ID": after} if after is not None else {}
    response = caller.client.get(events_url(run_id) + "?" + query, HTTP_ACCEPT="text/event-stream", **headers)
    assert response.status_code == 200, content_of(response)
    assert response["Content-Type"].startswith("text/event-stream")
    out: list[tuple[str | None, str, Any]] = []
    for block in content_of(response).decode().split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        fields = dict(line.split(": ", 1) for line in lines if ": " in line)
        if "data" in fields:
            out.append((fields.get("id"), fields.get("event", "message"), json.loads(fields["data"])))
    return out


def test_events_are_numbered_in_order_and_the_stream_gives_them_back_and_ends_at_settled(alice: Caller) -> None:
    run_id = started(alice)
    first = publish(
        alice,
        run_id,
        {"kind": "text_delta", "delta": "Lis"},
        {"kind": "thinking_delta", "delta": "they asked about"},
        {"kind": "tool_started", "id": "c1", "name": "search"},
    )
    assert [(e["seq"], e["kind"]) for e in first["events"]] == [
        (1, "text_delta"),
        (2, "thinking_delta"),
        (3, "tool_started"),
    ]
    # A single event object is a batch of one.
    one = post_ok(
        alice.client,
        events_url(run_id),
        {"kind": "tool_finished", "id": "c1", "name": "search", "outcome": {"hits": 2}},
    )
    assert one["events"] == [{"seq": 4, "kind": "tool_finished"}] and one["outcome"] == ""
    end = publish(alice, run_id, {"kind": "text_delta", "delta": "bon"}, {"kind": "settled", "snapshot": SNAP_END})
    assert (end["last_seq"], end["outcome"]) == (6, "settled")

    read = frames(alice, run_id, query="")  # no max_seconds: it ends because the run settled
    assert [(i, e) for i, e, _ in read] == [
        ("1", "text_delta"),
        ("2", "thinking_delta"),
        ("3", "tool_started"),
        ("4", "tool_finished"),
        ("5", "text_delta"),
        ("6", "settled"),
    ]
    assert read[0][2]["delta"] == "Lis" and read[3][2]["outcome"] == {"hits": 2}
    assert read[5][2]["snapshot"] == SNAP_END and read[5][2]["seq"] == 6 and "at" in read[5][2]
    # Resumed after the third: the rest, nothing repeated.
    assert [i for i, _, _ in frames(alice, run_id, after="3")] == ["4", "5", "6"]
    assert [i for i, _, _ in frames(alice, run_id, query="after=5")] == ["6"]
    assert frames(alice, run_id, after="6") == []
    # The end is audited (ids and counts); the deltas are not.
    record = AuditRecord.objects.get(action="thread.run", outcome="settled")
    assert record.subject == run_id and record.details == {"events": 6}


def test_the_snapshot_is_the_latest_an_event_carried_and_deltas_leave_it(alice: Caller) -> None:
    run_id = started(alice)
    url = f"/api/v1/threads/t-run/runs/{run_id}/snapshot"
    empty = get_ok(alice.client, url)
    assert (empty["snapshot"], empty["snapshot_seq"], empty["last_seq"], empty["outcome"]) == (None, None, 0, "")

    publish(alice, run_id, {"kind": "snapshot", "snapshot": SNAP_1}, {"kind": "text_delta", "delta": "x"})
    assert get_ok(alice.client, url)["snapshot"] == SNAP_1
    publish(
        alice, run_id, {"kind": "snapshot", "snapshot": SNAP_2}, {"kind": "tool_started", "id": "c1", "name": "search"}
    )
    publish(
        alice, run_id, {"kind": "text_delta", "delta": "y"}, {"kind": "tool_finished", "id": "c1", "name": "search"}
    )
    now = get_ok(alice.client, url)
    assert (now["snapshot"], now["snapshot_seq"], now["last_seq"]) == (SNAP_2, 3, 6)

    failed = {**SNAP_2, "phase": "faulted", "error": {"message": "model timeout"}}
    publish(alice, run_id, {"kind": "faulted", "error": {"message": "model timeout"}, "snapshot": failed})
    after = get_ok(alice.client, url)
    assert (after["snapshot"], after["snapshot_seq"], after["outcome"]) == (failed, 7, "faulted")
    # The run finishing does not take it: kept after the run settles.
    post_ok(alice.client, f"/api/v1/threads/t-run/runs/{run_id}/finish", None, status=200)
    assert get_ok(alice.client, url)["snapshot"] == failed


def test_nothing_is_taken_after_settled_or_faulted(alice: Caller) -> None:
    run_id = started(alice)
    publish(alice, run_id, {"kind": "text_delta", "delta": "a"}, {"kind": "settled", "snapshot": SNAP_END})

    refused = error_of(
        alice.client.post(events_url(run_id), {"events": [{"kind": "text_delta", "delta": "late"}]}, format="json"), 409
    )
    assert refused["code"] == "run_settled"
    assert (
        error_of(alice.client.post(events_url(run_id), {"kind": "settled", "snapshot": SNAP_END}, format="json"), 409)[
            "code"
        ]
        == "run_settled"
    )
    assert RunEvent.objects.filter(run_id=run_id).count() == 2
    # Within one batch: an event after the end refuses the whole batch.
    other = started(alice, "t-two")
    batch = {
        "events": [
            {"kind": "text_delta", "delta": "a"},
            {"kind": "faulted", "error": "boom", "snapshot": SNAP_1},
            {"kind": "text_delta", "delta": "b"},
        ]
    }
    inner = error_of(alice.client.post(events_url(other, "t-two"), batch, format="json"), 409)
    assert (inner["code"], inner["field"]) == ("run_settled", "events[2]")
    run = ThreadRun.objects.get(pk=other)
    assert (run.ledger_seq, run.ledger_outcome, run.snapshot) == (0, "", None)
    assert not RunEvent.objects.filter(run_id=other).exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"events": []}, "events"),
        ({"events": "x"}, "events"),
        ({"events": [{"kind": "shout"}]}, "events[0].kind"),
        ({"events": [{"delta": "x"}]}, "events[0].kind"),
        ({"events": [{"kind": "text_delta"}]}, "events[0].delta"),
        ({"events": [{"kind": "text_delta", "delta": 5}]}, "events[0].delta"),
        ({"events": [{"kind": "text_delta", "delta": "x" * 65537}]}, "events[0].delta"),
        ({"events": [{"kind": "text_delta", "delta": "x", "colour": "red"}]}, "events[0].colour"),
        ({"events": [{"kind": "text_delta", "delta": "x"}, {"kind": "tool_started", "id": "c1"}]}, "events[1].name"),
        ({"events": [{"kind": "tool_started", "id": "", "name": "s"}]}, "events[0].id"),
        ({"events": [{"kind": "snapshot", "snapshot": [1]}]}, "events[0].snapshot"),
        ({"events": [{"kind": "snapshot", "snapshot": {"phase": "dreaming"}}]}, "events[0].snapshot.phase"),
        ({"events": [{"kind": "settled"}]}, "events[0].snapshot"),
        ({"events": [{"kind": "faulted", "snapshot": {}}]}, "events[0].error"),
        ({"events": [{"kind": "faulted", "error": 3, "snapshot": {}}]}, "events[0].error"),
        ({"events": [{"kind": "text_delta", "delta": "x"}], "more": 1}, "more"),
        ({"kind": "text_delta"}, "event.delta"),
        ([{"kind": "text_delta", "delta": "x"}], "event"),
    ],
)
def test_a_bad_event_is_a_400_naming_its_field_and_nothing_is_written(alice: Caller, body: Any, field: str) -> None:
    run_id = started(alice)
    error = error_of(alice.client.post(events_url(run_id), body, format="json"), 400)
    assert error["field"] == field, error
    assert not RunEvent.objects.exists() and ThreadRun.objects.get(pk=run_id).ledger_seq == 0


def test_a_batch_over_the_limit_is_a_413(alice: Caller) -> None:
    run_id = started(alice)
    body = {"events": [{"kind": "text_delta", "delta": "x"}] * 501}
    assert error_of(alice.client.post(events_url(run_id), body, format="json"), 413)["field"] == "events"


def test_deltas_are_kept_in_a_bounded_window_and_the_end_and_snapshot_stay(alice: Caller, settings: Any) -> None:
    settings.RUN_EVENTS_WINDOW = 5
    run_id = started(alice)
    publish(
        alice,
        run_id,
        {"kind": "snapshot", "snapshot": SNAP_1},
        *({"kind": "text_delta", "delta": f"d{n}"} for n in range(2, 9)),
    )
    publish(
        alice,
        run_id,
        *({"kind": "text_delta", "delta": f"d{n}"} for n in range(9, 13)),
        {"kind": "settled", "snapshot": SNAP_END},
    )

    kept = list(RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "kind"))
    assert kept == [(9, "text_delta"), (10, "text_delta"), (11, "text_delta"), (12, "text_delta"), (13, "settled")]
    # A subscriber from the start learns what the window took, then gets what is kept, in order.
    read = frames(alice, run_id, query="")
    assert read[0] == (None, "gap", {"from_seq": 1, "to_seq": 8})
    assert [i for i, _, _ in read[1:]] == ["9", "10", "11", "12", "13"]
    assert get_ok(alice.client, f"/api/v1/threads/t-run/runs/{run_id}/snapshot")["snapshot"] == SNAP_END
    # The window keeps the newest deltas of a run still going too.
    settings.RUN_EVENTS_WINDOW = 2
    going = started(alice, "t-going")
    for n in range(4):
        post_ok(alice.client, events_url(going, "t-going"), {"kind": "text_delta", "delta": f"{n}"})
    assert list(RunEvent.objects.filter(run_id=going).order_by("seq").values_list("seq", flat=True)) == [3, 4]


def test_another_agents_run_is_not_found_everywhere(alice: Caller, mallory: Caller) -> None:
    run_id = started(alice)
    publish(alice, run_id, {"kind": "snapshot", "snapshot": SNAP_1})
    post_thread(mallory, "t-run")  # her own thread of the same name

    for response in (
        mallory.client.post(events_url(run_id), {"kind": "text_delta", "delta": "x"}, format="json"),
        mallory.client.get(events_url(run_id), HTTP_ACCEPT="text/event-stream"),
        mallory.client.get(f"/api/v1/threads/t-run/runs/{run_id}/snapshot"),
    ):
        assert error_of(response, 404)["code"] == "not_found"
    # Nor through another thread of alice's own.
    post_thread(alice, "t-other")
    assert error_of(alice.client.get(f"/api/v1/threads/t-other/runs/{run_id}/snapshot"), 404)["code"] == "not_found"
    assert RunEvent.objects.filter(run_id=run_id).count() == 1


def test_the_events_and_snapshot_go_with_the_thread_and_with_the_persons_erasure(alice: Caller) -> None:
    run_id = started(alice)
    publish(alice, run_id, {"kind": "text_delta", "delta": "x"}, {"kind": "settled", "snapshot": SNAP_END})
    second = started(alice, "t-two")
    post_ok(alice.client, events_url(second, "t-two"), {"kind": "snapshot", "snapshot": SNAP_1})

    answered(alice.client.delete("/api/v1/threads/t-run"), 204)
    assert not RunEvent.objects.filter(run_id=run_id).exists() and not ThreadRun.objects.filter(pk=run_id).exists()
    post_ok(alice.client, "/api/v1/users/u-ana/forget", {}, status=200)
    assert not Thread.objects.filter(agent=alice.agent).exists()
    assert not RunEvent.objects.exists() and not ThreadRun.objects.exists()


def test_the_bodies_are_sealed_at_rest(encrypted: Any, alice: Caller) -> None:
    from django.db import connection

    run_id = started(alice)
    publish(
        alice,
        run_id,
        {"kind": "text_delta", "delta": "PLANTED-DELTA"},
        {"kind": "snapshot", "snapshot": {**SNAP_1, "model": "PLANTED-MODEL"}},
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT body::text FROM memoryapp_runevent WHERE run_id = %s", [run_id])
        bodies = [row[0] for row in cursor.fetchall()]
        cursor.execute("SELECT snapshot::text FROM memoryapp_threadrun WHERE id = %s", [run_id])
        snapshot = cursor.fetchone()[0]
    assert len(bodies) == 2 and not any("PLANTED" in body for body in bodies) and "PLANTED" not in snapshot
    assert frames(alice, run_id)[0][2]["delta"] == "PLANTED-DELTA"
    assert get_ok(alice.client, f"/api/v1/threads/t-run/runs/{run_id}/snapshot")["snapshot"]["model"] == "PLANTED-MODEL"
