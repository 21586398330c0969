"""`POST /api/v1/users/{user_id}/forget`: the calling agent's memory of a person is erased, counted;
another agent's is untouched; bad input is a 4xx naming the field and changes nothing."""

from __future__ import annotations

import json

import pytest

from memoryapp.forgetting.services import COUNT_KEYS
from memoryapp.models import Entry, MemoryFileVersion, MemoryItem, Thread
from tests.kit.api import Caller, create_memory_file, error_of, post_entry, post_item, post_ok, post_thread

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
    assert set(body["counts"]) == set(COUNT_KEYS)
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
