"""A person's erasure in `redact` mode keeps their threads but not what their runs published
(review of 70a3910): the run ledger's events (the model's deltas, snapshots of the conversation)
and the run's latest snapshot hold their words as much as the entries do."""

from __future__ import annotations

import json

from memoryapp.models import RunEvent, ThreadRun
from tests.kit.api import Caller, post_ok, post_thread
from tests.threads.test_run_ledger import SNAP_1, publish, started

SAID = {**SNAP_1, "messages": [{"role": "user", "content": "My passport is P-7731, renew it."}]}


def test_a_redact_erasure_takes_the_run_ledger_of_the_persons_threads(alice: Caller) -> None:
    run_id = started(alice)
    publish(alice, run_id, {"kind": "text_delta", "delta": "Renewing P-7731"}, {"kind": "snapshot", "snapshot": SAID})
    assert ThreadRun.objects.get(pk=run_id).snapshot == SAID

    post_ok(alice.client, "/api/v1/users/u-ana/forget", {"mode": "redact"}, status=200)

    run = ThreadRun.objects.get(pk=run_id)  # the thread stays in redact mode, and its runs
    assert run.snapshot is None
    assert not RunEvent.objects.filter(run_id=run_id).exists()


def test_her_mentions_in_the_run_ledger_of_anothers_thread_are_redacted(alice: Caller) -> None:
    """Carl's run, in Carl's thread, published her name and e-mail: the forget with her identifiers
    keeps Carl's run and replaces each mention of her, in the events and in the snapshot."""
    post_thread(alice, "t-carl", user_id="u-carl")
    run_id = post_ok(alice.client, "/api/v1/threads/t-carl/runs", {})["id"]
    said = {**SNAP_1, "messages": [{"role": "user", "content": "Book Ines Valdomiro, ines@example.org, a seat."}]}
    url = f"/api/v1/threads/t-carl/runs/{run_id}/events"
    post_ok(alice.client, url, {"events": [{"kind": "text_delta", "delta": "Booking for ines@example.org"}]})
    post_ok(alice.client, url, {"events": [{"kind": "snapshot", "snapshot": said}]})

    done = post_ok(
        alice.client,
        "/api/v1/users/u-ines/forget",
        {"identifiers": {"emails": ["ines@example.org"], "names": ["Ines Valdomiro"]}},
        status=200,
    )

    run = ThreadRun.objects.get(pk=run_id)
    assert run.snapshot["messages"][0]["content"] == "Book [erased person], [erased person], a seat."
    bodies = [e.body for e in RunEvent.objects.filter(run_id=run_id).order_by("seq")]
    assert bodies[0] == {"delta": "Booking for [erased person]"}
    assert "ines" not in json.dumps(bodies).lower()
    assert done["counts"]["mentions"]["redacted_run_event"] == 2
    assert done["counts"]["mentions"]["redacted_thread_run"] == 1
