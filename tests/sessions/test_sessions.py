"""Channel sessions (004 `SessionManager`): a person's conversation on a channel maps onto one
thread of the agent; get-or-create, the list, close and reopen, over the agent API."""

from __future__ import annotations

import json
import zipfile
from typing import Any

import pytest
from rest_framework.test import APIClient

from governance.export import services as export
from governance.export.services import export_request_create, export_run
from governance.models import AuditRecord
from memoryapp.models import ChannelSession, Thread
from tests.kit.api import Caller, answered, error_of, get_ok, patch_ok, post_entry, post_ok
from tests.kit.concurrency import in_threads

SESSIONS = "/api/v1/sessions"


def open_session(
    caller: Caller,
    user_id: str = "u-ana",
    channel_type: str = "telegram",
    channel_id: str = "chat-42",
    *,
    status: int | tuple[int, ...] = (200, 201),
) -> dict[str, Any]:
    body = {"user_id": user_id, "channel_type": channel_type, "channel_id": channel_id}
    return dict(post_ok(caller.client, SESSIONS, body, status=status))


def test_get_or_create_makes_the_session_and_its_thread_once(alice: Caller) -> None:
    made = open_session(alice, status=201)
    again = open_session(alice, status=200)

    assert made["created"] is True and again["created"] is False
    session = made["session"]
    assert again["session"]["id"] == session["id"] and again["thread"]["id"] == made["thread"]["id"]
    assert (session["user_id"], session["channel_type"], session["channel_id"], session["status"]) == (
        "u-ana",
        "telegram",
        "chat-42",
        "active",
    )
    assert session["thread_id"] == made["thread"]["id"] and made["thread"]["user_id"] == "u-ana"
    row = ChannelSession.objects.get(agent=alice.agent)
    assert row.thread.external_id == session["thread_id"] and row.thread.user_id == "u-ana"
    assert Thread.objects.filter(agent=alice.agent).count() == 1
    # The thread is an ordinary thread of the agent: turns are appended to it by its id.
    post_entry(alice, session["thread_id"], role="user", content="hello from telegram")
    # Audited by ids: the session, never the channel id.
    record = AuditRecord.objects.get(action="session.opened")
    assert record.subject == session["id"] and "chat-42" not in json.dumps(record.details)


def test_another_channel_or_person_is_another_session(alice: Caller) -> None:
    first = open_session(alice)
    other_chat = open_session(alice, channel_id="chat-43", status=201)
    other_type = open_session(alice, channel_type="slack", status=201)
    other_person = open_session(alice, user_id="u-ben", status=201)

    threads = {
        first["thread"]["id"],
        other_chat["thread"]["id"],
        other_type["thread"]["id"],
        other_person["thread"]["id"],
    }
    assert len(threads) == 4 and ChannelSession.objects.filter(agent=alice.agent).count() == 4


def test_the_sessions_thread_gets_the_agents_compaction_settings(alice: Caller) -> None:
    patch_ok(
        alice.client, "/api/v1/settings/compaction", {"enabled": True, "context_window": 9000, "message_threshold": 40}
    )

    made = open_session(alice, status=201)

    assert made["compaction"]["enabled"] is True
    assert (made["compaction"]["context_window"], made["compaction"]["message_threshold"]) == (9000, 40)
    own = get_ok(alice.client, f"/api/v1/threads/{made['thread']['id']}/settings/compaction")
    assert own["own"] == {} and own["effective"] == made["compaction"]
    # A later change of the agent's settings reaches the session's thread too.
    patch_ok(alice.client, "/api/v1/settings/compaction", {"context_window": 12000})
    assert get_ok(alice.client, f"{SESSIONS}/{made['session']['id']}")["compaction"]["context_window"] == 12000


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"channel_type": "telegram", "channel_id": "c"}, "user_id"),
        ({"user_id": "", "channel_type": "telegram", "channel_id": "c"}, "user_id"),
        ({"user_id": "a/b", "channel_type": "telegram", "channel_id": "c"}, "user_id"),
        ({"user_id": "u-ana", "channel_id": "c"}, "channel_type"),
        ({"user_id": "u-ana", "channel_type": "tele gram", "channel_id": "c"}, "channel_type"),
        ({"user_id": "u-ana", "channel_type": "x" * 65, "channel_id": "c"}, "channel_type"),
        ({"user_id": "u-ana", "channel_type": "telegram"}, "channel_id"),
        ({"user_id": "u-ana", "channel_type": "telegram", "channel_id": ""}, "channel_id"),
        ({"user_id": "u-ana", "channel_type": "telegram", "channel_id": "line\nbreak"}, "channel_id"),
        ({"user_id": "u-ana", "channel_type": "telegram", "channel_id": " padded"}, "channel_id"),
        ({"user_id": "u-ana", "channel_type": "telegram", "channel_id": "c" * 256}, "channel_id"),
        ({"user_id": "u-ana", "channel_type": "telegram", "channel_id": ["c"]}, "channel_id"),
        ({"user_id": "u-ana", "channel_type": "telegram", "channel_id": "c", "agent": "x"}, "agent"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_makes_nothing(alice: Caller, body: dict[str, Any], field: str) -> None:
    error = error_of(alice.client.post(SESSIONS, body, format="json"), 400)

    assert error["field"] == field, error
    assert not ChannelSession.objects.exists() and not Thread.objects.exists()


def test_the_list_is_newest_first_filtered_and_paged_by_cursor(alice: Caller) -> None:
    made = [
        open_session(alice, user_id=user, channel_id=f"chat-{n}")["session"]
        for n, user in enumerate(["u-ana", "u-ben", "u-ana", "u-ana", "u-ben"])
    ]
    answered(alice.client.post(f"{SESSIONS}/{made[2]['id']}/close"), 200)

    everything = get_ok(alice.client, SESSIONS)
    assert [s["id"] for s in everything["results"]] == [s["id"] for s in reversed(made)]
    assert everything["next"] is None and everything["next_cursor"] is None

    anas = get_ok(alice.client, SESSIONS, {"user_id": "u-ana", "status": "active", "limit": 1})
    assert [s["id"] for s in anas["results"]] == [made[3]["id"]]
    rest = get_ok(alice.client, SESSIONS, {"cursor": anas["next_cursor"]})
    assert [s["id"] for s in rest["results"]] == [made[0]["id"]] and rest["next_cursor"] is None
    closed = get_ok(alice.client, SESSIONS, {"status": "closed"})
    assert [(s["id"], s["status"]) for s in closed["results"]] == [(made[2]["id"], "closed")]
    # A cursor sent with other filters, a made-up cursor, a bad status or limit: 400 naming them.
    assert (
        error_of(alice.client.get(SESSIONS, {"cursor": anas["next_cursor"], "user_id": "u-ben"}))["field"] == "cursor"
    )
    assert error_of(alice.client.get(SESSIONS, {"cursor": "not-a-cursor"}))["field"] == "cursor"
    assert error_of(alice.client.get(SESSIONS, {"status": "sleeping"}))["field"] == "status"
    assert error_of(alice.client.get(SESSIONS, {"limit": 0}))["field"] == "limit"


def test_close_keeps_the_thread_and_the_channel_opens_a_new_session(alice: Caller) -> None:
    first = open_session(alice, status=201)
    sid = first["session"]["id"]

    closed = post_ok(alice.client, f"{SESSIONS}/{sid}/close", None, status=200)
    assert closed["session"]["status"] == "closed" and "closed_at" in closed["session"]
    assert post_ok(alice.client, f"{SESSIONS}/{sid}/close", None, status=200)["session"] == closed["session"]
    assert Thread.objects.filter(external_id=first["thread"]["id"]).exists()

    second = open_session(alice, status=201)
    assert second["session"]["id"] != sid and second["thread"]["id"] != first["thread"]["id"]
    # Two sessions of one channel cannot both be active: reopening the first is refused meanwhile.
    refused = error_of(alice.client.post(f"{SESSIONS}/{sid}/reopen"), 409)
    assert refused["code"] == "session_active" and second["session"]["id"] in refused["message"]
    assert ChannelSession.objects.get(pk=sid).status == "closed"

    post_ok(alice.client, f"{SESSIONS}/{second['session']['id']}/close", None, status=200)
    reopened = post_ok(alice.client, f"{SESSIONS}/{sid}/reopen", None, status=200)
    assert reopened["session"]["status"] == "active" and "closed_at" not in reopened["session"]
    assert open_session(alice, status=200)["session"]["id"] == sid
    outcomes = list(
        AuditRecord.objects.filter(action__startswith="session.").order_by("seq").values_list("outcome", flat=True)
    )
    assert outcomes == ["opened", "closed", "opened", "closed", "reopened"]


def test_another_agents_sessions_are_not_found_and_keep_to_themselves(
    alice: Caller, bob: Caller, mallory: Caller
) -> None:
    alices = open_session(alice, status=201)
    sid = alices["session"]["id"]

    for method, url in [
        ("get", f"{SESSIONS}/{sid}"),
        ("post", f"{SESSIONS}/{sid}/close"),
        ("post", f"{SESSIONS}/{sid}/reopen"),
    ]:
        assert error_of(getattr(mallory.client, method)(url), 404)["code"] == "not_found"
    assert get_ok(mallory.client, SESSIONS)["results"] == []
    assert mallory.client.get(f"/api/v1/threads/{alices['thread']['id']}").status_code == 404
    # The same person on the same channel is another session of bob's, on a thread of bob's.
    bobs = open_session(bob, status=201)
    assert (
        bobs["session"]["id"] != sid and Thread.objects.get(external_id=bobs["thread"]["id"]).agent_id == bob.agent.pk
    )
    assert ChannelSession.objects.get(pk=sid).status == "active"


def test_a_session_needs_an_agent_key(anonymous: APIClient) -> None:
    assert error_of(
        anonymous.post(SESSIONS, {"user_id": "u", "channel_type": "t", "channel_id": "c"}, format="json"), 401
    )


@pytest.mark.django_db(transaction=True)
def test_concurrent_get_or_create_of_one_conversation_makes_one_session_and_one_thread(alice: Caller) -> None:
    """Eight requests at once (a barrier, each its own connection): one 201, seven 200, one row of
    each kind. Without the key's lock and the unique constraint, each made a thread of its own."""

    def call() -> tuple[int, dict[str, Any]]:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {alice.key}")
        response = client.post(
            SESSIONS, {"user_id": "u-ana", "channel_type": "web", "channel_id": "w-1"}, format="json"
        )
        return response.status_code, response.json()

    outcomes = in_threads(*[call for _ in range(8)])

    assert all(isinstance(o, tuple) for o in outcomes), outcomes
    statuses = sorted(status for status, _ in outcomes)
    assert statuses == [200] * 7 + [201], outcomes
    assert len({body["session"]["id"] for _, body in outcomes}) == 1
    assert len({body["thread"]["id"] for _, body in outcomes}) == 1
    assert ChannelSession.objects.filter(agent=alice.agent).count() == 1
    assert Thread.objects.filter(agent=alice.agent).count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_unique_constraint_holds_without_the_lock(alice: Caller) -> None:
    """The database itself refuses a second active session of one key (the constraint, not only the lock)."""
    from django.db import IntegrityError, transaction

    made = open_session(alice, status=201)
    thread = Thread.objects.create(agent=alice.agent, external_id="t-second", user_id="u-ana")
    with pytest.raises(IntegrityError), transaction.atomic():
        ChannelSession.objects.create(
            agent=alice.agent, thread=thread, user_id="u-ana", channel_type="telegram", channel_id="chat-42"
        )
    assert ChannelSession.objects.get().pk == made["session"]["id"]


def test_forgetting_a_person_deletes_their_sessions_only(alice: Caller, bob: Caller) -> None:
    anas = open_session(alice, status=201)
    bens = open_session(alice, user_id="u-ben", status=201)
    bobs_ana = open_session(bob, status=201)

    body = post_ok(alice.client, "/api/v1/users/u-ana/forget", {}, status=200)

    assert body["counts"]["sessions"] == 1 and body["counts"]["threads"] == 1
    assert not ChannelSession.objects.filter(pk=anas["session"]["id"]).exists()
    assert not Thread.objects.filter(external_id=anas["thread"]["id"]).exists()
    assert set(ChannelSession.objects.values_list("pk", flat=True)) == {
        bens["session"]["id"],
        bobs_ana["session"]["id"],
    }
    # Redacting keeps the threads, but the sessions (the channel ids naming the person) go.
    redacted = post_ok(alice.client, "/api/v1/users/u-ben/forget", {"mode": "redact"}, status=200)
    assert redacted["counts"]["sessions"] == 1
    assert Thread.objects.filter(external_id=bens["thread"]["id"]).exists()
    assert not ChannelSession.objects.filter(pk=bens["session"]["id"]).exists()


def test_deleting_a_sessions_thread_takes_the_session_with_it(alice: Caller) -> None:
    """Threads are deleted by bulk statements (a delete, the prune, an erasure): the session row goes
    with its thread in the database itself, never failing the delete at commit."""
    made = open_session(alice, status=201)

    answered(alice.client.delete(f"/api/v1/threads/{made['thread']['id']}"), 204)

    assert not ChannelSession.objects.exists()
    assert error_of(alice.client.get(f"{SESSIONS}/{made['session']['id']}"), 404)["code"] == "not_found"
    assert open_session(alice, status=201)["session"]["id"] != made["session"]["id"]


def test_a_persons_export_holds_their_sessions(alice: Caller, bob: Caller, settings: Any, tmp_path: Any) -> None:
    settings.EXPORT_DIR = str(tmp_path)
    anas = open_session(alice, status=201)
    open_session(alice, user_id="u-ben", status=201)
    post_ok(alice.client, f"{SESSIONS}/{anas['session']['id']}/close", None, status=200)
    bobs_ana = open_session(bob, channel_type="slack", status=201)

    request = export_request_create(user_id="u-ana", agent_ids=[], actor="staff:officer")
    export_run(request_id=request.pk)
    request.refresh_from_db()
    path = export.export_archive_path(request)
    assert path is not None
    with zipfile.ZipFile(path) as archive:
        lines = archive.read("sessions.jsonl").decode().splitlines()
        manifest = json.loads(archive.read("manifest.json"))
    sessions = {r["session"]["id"]: r["session"] for r in map(json.loads, lines)}
    assert set(sessions) == {anas["session"]["id"], bobs_ana["session"]["id"]}
    mine = sessions[anas["session"]["id"]]
    assert (mine["channel_type"], mine["channel_id"], mine["status"]) == ("telegram", "chat-42", "closed")
    assert mine["thread_id"] == anas["thread"]["id"] and mine["agent_id"] == alice.agent.pk
    assert manifest["counts"]["sessions"] == 2
