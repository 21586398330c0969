"""Messages a person sends while their erasure runs (memoryapp.subjects.erasing, step 5): refused
with 409 `person_being_erased` naming the field, nothing stored, so none sent after the erasure
took her messages in others' threads outlives it; a write in flight when the erasure starts is
waited for and taken with the rest; other senders are not held up."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import transaction

from memoryapp.forgetting.person import person_erase
from memoryapp.models import Entry, Thread
from tests.forgetting.test_index_races import WAIT, Side, _until
from tests.kit.api import Caller, import_jsonl, post_entry, post_thread
from tests.kit.erasing import erase_with_writes_between, erasure_held
from tests.kit.mentions import PERSON, her_thread

pytestmark = pytest.mark.django_db(transaction=True)  # the erasure and the writer on two connections

URL = "/api/v1/threads/t-carl/entries"


def _hers(caller: Caller) -> int:
    return Entry.objects.filter(agent=caller.agent, sender=PERSON).count()


def _her_threads(caller: Caller) -> bool:
    return Thread.objects.filter(agent=caller.agent, user_id=PERSON).exists()


def _carls_thread_with_her_message(caller: Caller) -> None:
    post_thread(caller, "t-carl", user_id="u-carl", metadata={"memoryUserIds": ["u-carl", PERSON]})
    post_entry(caller, "t-carl", role="user", content="Carl asks about the trip.")
    post_entry(caller, "t-carl", role="user", content="I fly on Monday.", metadata={"userId": PERSON})


def test_her_message_sent_after_the_erasure_took_hers_is_refused_and_none_outlives_it(alice: Caller) -> None:
    _carls_thread_with_her_message(alice)
    # Where her messages are gone: the sender step is done.
    [answer] = erase_with_writes_between(
        alice,
        lambda: alice.client.post(
            URL, {"role": "user", "content": "And back on Friday.", "metadata": {"userId": PERSON}}, format="json"
        ),
        when=lambda: not _hers(alice),
        what="her message",
    )
    # Before: 201, and her message stayed in Carl's thread after her erasure.
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["code"] == "person_being_erased"
    assert answer.json()["error"]["field"] == "metadata.userId"
    assert _hers(alice) == 0
    assert not Entry.objects.filter(agent=alice.agent, content__icontains="Friday").exists()
    # Once it ended, a message of hers is a new one, stored as any other.
    post_entry(alice, "t-carl", role="user", content="Hello again.", metadata={"userId": PERSON})
    assert _hers(alice) == 1


def test_while_she_is_being_erased_only_her_messages_are_refused_on_every_append_path(alice: Caller) -> None:
    _carls_thread_with_her_message(alice)
    with erasure_held(alice.agent.pk):
        single = alice.client.post(
            URL, {"role": "user", "content": "Single.", "metadata": {"userId": PERSON}}, format="json"
        )
        batch = alice.client.post(
            URL,
            {
                "entries": [
                    {"role": "user", "content": "Carl again."},
                    {"role": "user", "content": "Batch.", "metadata": {"userId": PERSON}},
                ]
            },
            format="json",
        )
        others = post_entry(alice, "t-carl", role="user", content="Dora here.", metadata={"userId": "u-dora"})
    assert single.status_code == 409 and single.json()["error"]["field"] == "metadata.userId", single.content
    assert batch.status_code == 409 and batch.json()["error"]["field"] == "entries[1].metadata.userId", batch.content
    assert others["content"] == "Dora here."
    assert _hers(alice) == 1  # the one written before
    assert not Entry.objects.filter(agent=alice.agent, content__in=["Single.", "Batch.", "Carl again."]).exists()


def test_a_message_of_hers_in_flight_when_her_erasure_starts_is_waited_for_and_erased(alice: Caller) -> None:
    _carls_thread_with_her_message(alice)
    inside, commit = threading.Event(), threading.Event()

    def writing() -> None:
        # Her message's write, its transaction held open after it took her lock shared.
        with transaction.atomic():
            answer = alice.client.post(
                URL, {"role": "user", "content": "In flight.", "metadata": {"userId": PERSON}}, format="json"
            )
            assert answer.status_code == 201, answer.content
            inside.set()
            assert commit.wait(WAIT)

    writer = Side(writing, "writer")
    assert inside.wait(WAIT)
    erasure = Side(lambda: person_erase(user_id=PERSON, agent_ids=[alice.agent.pk], actor="agent:alice"), "erasure")
    _until(lambda: erasure.waits_on(writer), "the erasure waited for the write in flight")
    commit.set()
    writer.join()
    erasure.join()
    assert not writer.errors and not erasure.errors, (writer.errors, erasure.errors)
    assert _hers(alice) == 0
    assert erasure.answer["entries_deleted"] >= 2


def _import_with_her_message(caller: Caller, thread_id: str) -> Any:
    """A JSONL import of Carl's thread holding a message of hers (a node whose sender she is)."""
    header = {"type": "thread", "format": 2, "thread": {"id": thread_id, "user_id": "u-carl"}}
    nodes = [
        {"id": "n1", "parent": None, "seq": 1, "turn": {"role": "user", "content": "Carl plans the trip."}},
        {"id": "n2", "parent": "n1", "seq": 2, "turn": {"role": "user", "content": "Imported: I land at noon."}},
    ]
    nodes[1]["metadata"] = {"userId": PERSON}
    lines = [json.dumps(header), *(json.dumps({"type": "node", "node": n}) for n in nodes)]
    return import_jsonl(caller, lines)


def test_her_message_imported_after_the_erasure_took_hers_is_refused_and_none_outlives_it(alice: Caller) -> None:
    # The import stores messages as an append does: one of hers is refused while her erasure runs.
    _carls_thread_with_her_message(alice)
    [answer] = erase_with_writes_between(
        alice,
        lambda: _import_with_her_message(alice, "t-carl-imported"),
        when=lambda: not _hers(alice),
        what="her message imported",
    )
    # Before: 201, and her imported message stayed after her erasure.
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["code"] == "person_being_erased"
    assert answer.json()["error"]["field"] == "nodes[1].metadata.userId"
    assert _hers(alice) == 0
    assert not Thread.objects.filter(agent=alice.agent, external_id="t-carl-imported").exists()
    # Once it ended, the same file is imported as any other.
    assert _import_with_her_message(alice, "t-carl-imported").status_code == 201
    assert _hers(alice) == 1


def test_a_thread_about_her_made_after_her_threads_went_is_refused_and_none_outlives_it(alice: Caller) -> None:
    her_thread(alice)
    post_thread(alice, "t-carl", user_id="u-carl")
    made, given = erase_with_writes_between(
        alice,
        lambda: alice.client.post("/api/v1/threads", {"id": "t-ines-2", "user_id": PERSON}, format="json"),
        lambda: alice.client.patch("/api/v1/threads/t-carl", {"user_id": PERSON}, format="json"),
        when=lambda: not _her_threads(alice),
        what="her thread",
    )
    # Before: 201 and 200, and both threads were hers after her erasure.
    for answer in (made, given):
        assert answer.status_code == 409, answer.content
        assert answer.json()["error"] == {
            "code": "person_being_erased",
            "message": answer.json()["error"]["message"],
            "field": "user_id",
        }
    assert not Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert Thread.objects.get(agent=alice.agent, external_id="t-carl").user_id == "u-carl"


def test_a_thread_of_hers_imported_after_the_erasure_took_her_threads_is_refused(alice: Caller) -> None:
    # An import whose header names her makes a thread about her, as POST /threads does.
    post_thread(alice, "t-hers", user_id=PERSON)
    post_entry(alice, "t-hers", role="user", content="Hello.")
    header = {"type": "thread", "format": 2, "thread": {"id": "t-hers-imported", "user_id": PERSON}}
    node = {"id": "n1", "parent": None, "seq": 1, "turn": {"role": "user", "content": "An imported turn."}}
    lines = [json.dumps(header), json.dumps({"type": "node", "node": node})]
    [answer] = erase_with_writes_between(
        alice,
        lambda: import_jsonl(alice, lines),
        when=lambda: not _her_threads(alice),
        what="a thread of hers imported",
    )
    # Before: 201, and the imported thread of hers outlived her erasure.
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["code"] == "person_being_erased"
    assert answer.json()["error"]["field"] == "user_id"
    assert not Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()
