"""`POST /api/v1/users/{user_id}/forget`: the calling agent's memory of a person is erased, counted;
another agent's is untouched; bad input is a 4xx naming the field and changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from governance.audit.chain import audit_append
from governance.models import JobRun
from governance.tasks import audit_verify_job, audit_verify_tick
from memoryapp.forgetting.person import person_erase, person_erase_plan
from memoryapp.forgetting.services import COUNT_KEYS
from memoryapp.models import Entry, MemoryFileVersion, MemoryItem, Thread
from tests.kit.api import Caller, create_memory_file, error_of, post_entry, post_item, post_ok, post_thread
from tests.kit.factories import AgentFactory, JobRunFactory

CANARY = "zebracanary"


def _eve(caller: Caller, thread_id: str) -> None:
    post_thread(caller, thread_id, user_id="u-eve")
    said = post_entry(caller, thread_id, role="user", content=f"My secret word is {CANARY}.")
    post_entry(caller, thread_id, role="assistant", content="Noted.")
    post_item(
        caller,
        kind="fact",
        subject="Eve",
        attribute="secret word",
        value=CANARY,
        user_id="u-eve",
        evidence=[{"entry_id": said["id"], "quote": f"secret word is {CANARY}"}],
    )
    caller.client.put("/api/v1/facts/users/u-eve/secret", {"value": CANARY}, format="json")
    create_memory_file(caller, "/memories/eve.md", f"Eve: {CANARY}\n", "/api/v1/memory-tool?user_id=u-eve")


def _held(caller: Caller) -> dict[str, int]:
    agent = caller.agent
    return {
        "threads": Thread.objects.filter(agent=agent, user_id="u-eve").count(),
        "entries": Entry.objects.filter(agent=agent, thread__user_id="u-eve").count(),
        "items": MemoryItem.objects.filter(agent=agent, user_id="u-eve").count(),
        "files": MemoryFileVersion.objects.filter(agent=agent, user_id="u-eve").count(),
    }


def test_forget_a_user_erases_what_the_agent_holds_and_answers_the_counts(alice: Caller, bob: Caller) -> None:
    _eve(alice, "t-eve")
    _eve(bob, "t-eve")
    post_thread(alice, "t-other", user_id="u-other")
    post_entry(alice, "t-other", role="user", content="Please keep otterkeep in mind.")
    bobs_before = _held(bob)

    body = post_ok(alice.client, "/api/v1/users/u-eve/forget", {}, status=200)

    assert body["user_id"] == "u-eve" and body["mode"] == "erase"
    assert set(body["counts"]) == {*COUNT_KEYS, "sessions", "mentions"}
    assert body["counts"]["threads"] == 1 and body["counts"]["entries_deleted"] == 2
    assert body["counts"]["items_purged"] == 2 and body["counts"]["facts"] == 1
    assert body["counts"]["file_versions"] == 1
    assert _held(alice) == {"threads": 0, "entries": 0, "items": 0, "files": 0}
    assert alice.client.get("/api/v1/threads/t-eve").status_code == 404
    assert alice.client.get("/api/v1/facts/users/u-eve/secret").status_code == 404
    found = alice.client.post("/api/v1/search", {"text": CANARY, "method": "keyword"}, format="json")
    assert found.status_code == 200 and CANARY not in json.dumps(found.json())
    # Another person of the same agent, and the same person at another agent, are whole.
    assert alice.client.get("/api/v1/threads/t-other").status_code == 200
    assert _held(bob) == bobs_before and bobs_before["entries"] == 2

    again = post_ok(alice.client, "/api/v1/users/u-eve/forget", None, status=200)
    assert not any(again["counts"].values())


def test_another_agents_forget_touches_nothing_of_alices(alice: Caller, mallory: Caller) -> None:
    _eve(alice, "t-eve")
    before = _held(alice)

    body = post_ok(mallory.client, "/api/v1/users/u-eve/forget", {}, status=200)

    assert not any(body["counts"].values())
    assert _held(alice) == before and before["threads"] == 1


def test_redact_mode_keeps_the_threads_and_redacts_every_entry(alice: Caller) -> None:
    _eve(alice, "t-eve")

    body = post_ok(alice.client, "/api/v1/users/u-eve/forget", {"mode": "redact"}, status=200)

    assert body["counts"]["entries_redacted"] == 2 and body["counts"]["threads"] == 0
    assert Thread.objects.filter(agent=alice.agent, user_id="u-eve").exists()
    assert not Entry.objects.filter(agent=alice.agent, text__contains=CANARY).exists()
    files = MemoryFileVersion.objects.filter(agent=alice.agent, user_id="u-eve").order_by("sequence")
    assert [v.content for v in files] == ["[redacted]", None]  # redacted, then deleted: out of the listing


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/v1/users/u-eve/forget", {"mode": "sideways"}, "mode"),
        ("/api/v1/users/u-eve/forget", {"everything": True}, "everything"),
        ("/api/v1/users/" + "u" * 129 + "/forget", {}, "user_id"),
        ("/api/v1/users/%20/forget", {}, "user_id"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(
    alice: Caller, url: str, body: dict[str, object], field: str
) -> None:
    _eve(alice, "t-eve")
    before = _held(alice)

    error = error_of(alice.client.post(url, body, format="json"), 400)

    assert error["field"] == field
    assert _held(alice) == before


def test_forget_needs_an_agent_key(anonymous: object, alice: Caller) -> None:
    _eve(alice, "t-eve")
    response = anonymous.post("/api/v1/users/u-eve/forget", {}, format="json")  # type: ignore[attr-defined]
    assert response.status_code in (401, 403)
    assert _held(alice)["threads"] == 1


def test_an_agents_forget_leaves_the_job_runs_of_no_agent_and_readyz_keeps_the_chain_whole(
    alice: Caller, bob: Caller, anonymous: Any
) -> None:
    """`POST /users/first_broken/forget` scrubbed the runs of no agent whose result held the key
    "first_broken" (the audit verification, staff's erasure, export and prune) to {"erased": true},
    and /readyz then said the audit chain was broken. An agent's erasure touches its own rows only."""
    for n in range(3):
        audit_append(action="test.thing", actor="t", subject=f"s{n}", outcome="done")
    audit_verify_tick()
    verification = JobRun.objects.get(kind="audit_verify")
    audit_verify_job(verification.pk)
    verification.refresh_from_db()
    assert verification.result["ok"] is True and "first_broken" in verification.result
    assert anonymous.get("/readyz").json()["details"]["audit_chain"]["ok"] is True
    # Staff's runs of no agent, one of them naming the person by value: staff's to erase, not alice's.
    staff_erasure = JobRunFactory(kind="erasure", arguments={"user_id": "first_broken"}, result={"erased": 0})
    prune = JobRunFactory(kind="retention_prune", arguments={"first_broken": 1}, result={"deleted": 2})
    alices = JobRunFactory(kind="extract", agent_id=alice.agent.pk, arguments={"user_id": "first_broken"})
    bobs = JobRunFactory(kind="extract", agent_id=bob.agent.pk, arguments={"user_id": "first_broken"})
    untouched = {run.pk: (run.arguments, run.result) for run in (verification, staff_erasure, prune, bobs)}

    body = post_ok(alice.client, "/api/v1/users/first_broken/forget", {}, status=200)

    assert body["counts"]["job_runs"] == 1
    alices.refresh_from_db()
    assert alices.arguments == {"erased": True}
    for run in JobRun.objects.filter(pk__in=list(untouched)):
        assert (run.arguments, run.result) == untouched[run.pk], run.kind
    chain = anonymous.get("/readyz").json()["details"]["audit_chain"]
    assert chain["ok"] is True and chain["run_id"] == verification.pk


@pytest.mark.django_db
def test_staffs_erasure_takes_the_runs_naming_the_person_by_value_never_by_a_key() -> None:
    """Across agents (staff's erasure), the runs of no agent that name the person go too; a run
    whose JSON only has a key spelled like the person's id is about no one."""
    agent = AgentFactory(slug="hold")
    by_value = JobRunFactory(kind="export", arguments={"user_id": "reason"}, result={"rows": 1})
    nested = JobRunFactory(kind="extract", agent_id=agent.pk, result={"people": [{"id": "reason"}]})
    by_key = JobRunFactory(kind="audit_verify", result={"ok": True, "reason": "", "first_broken": None})
    assert person_erase_plan(user_id="reason", unowned=True)["job_runs"] == 2

    counts = person_erase(user_id="reason", unowned=True)

    assert counts["job_runs"] == 2
    for run in (by_value, nested, by_key):
        run.refresh_from_db()
    assert by_value.arguments == by_value.result == nested.result == {"erased": True}
    assert by_key.result == {"ok": True, "reason": "", "first_broken": None}
