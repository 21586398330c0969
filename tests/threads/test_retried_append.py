"""A retried append is idempotent (000 `SessionDag.append`): the same turn at the same client-given
time under the same parent is the node already there; the API answers it with 200 instead of 201."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryapp.models import Entry, Thread
from tests.kit.api import Caller, post_ok, post_thread
from tests.kit.concurrency import in_threads

URL = "/api/v1/threads/t-1/entries"
AT = "2026-03-01T10:00:00.123Z"


def _thread(caller: Caller) -> Thread:
    post_thread(caller, "t-1")
    return Thread.objects.get(agent=caller.agent, external_id="t-1")


def _leaf(thread: Thread) -> str | None:
    thread.refresh_from_db()
    return thread.active_leaf_id


def test_a_retried_append_answers_the_entry_already_there_with_200_and_writes_nothing(alice: Caller) -> None:
    thread = _thread(alice)
    first = post_ok(alice.client, URL, {"role": "user", "content": "hello"})
    body = {"role": "assistant", "content": "hi there", "created_at": AT}
    made = post_ok(alice.client, URL, body, status=201)
    again = post_ok(alice.client, URL, body, status=200)
    assert again["id"] == made["id"] and again["seq"] == made["seq"]
    assert Entry.objects.filter(thread=thread).count() == 2
    assert _leaf(thread) == made["id"]
    # The response lost, the client went on elsewhere (a rewind), then retried: the leaf advances to it.
    post_ok(alice.client, "/api/v1/threads/t-1/rewind", {"entry_id": first["id"]}, status=200)
    assert post_ok(alice.client, URL, body, status=200)["id"] == made["id"]
    assert Entry.objects.filter(thread=thread).count() == 2
    assert _leaf(thread) == made["id"]
    # What is added next goes after it, at the next seq.
    after = post_ok(alice.client, URL, {"role": "user", "content": "thanks"})
    assert after["parent_id"] == made["id"] and after["seq"] == 3


def test_a_turn_that_differs_in_content_role_or_time_is_a_new_entry(alice: Caller) -> None:
    thread = _thread(alice)
    root = post_ok(alice.client, URL, {"role": "user", "content": "start"}, status=201)
    child = {"role": "assistant", "content": "a", "created_at": AT, "parent_id": root["id"]}
    made = post_ok(alice.client, URL, child, status=201)
    ids = {made["id"]}
    for changed in ({"content": "b"}, {"role": "user"}, {"created_at": "2026-03-01T10:00:01.123Z"}):
        ids.add(post_ok(alice.client, URL, {**child, **changed}, status=201)["id"])
    assert len(ids) == 4
    # Without a client-given time every append is dated anew: two identical turns are two entries.
    plain = {"role": "user", "content": "ok"}
    assert post_ok(alice.client, URL, plain, status=201)["id"] != post_ok(alice.client, URL, plain, status=201)["id"]
    assert Entry.objects.filter(thread=thread).count() == 7


def test_a_retried_batch_naming_its_first_parent_answers_200_and_a_partly_new_one_201(alice: Caller) -> None:
    thread = _thread(alice)
    root = post_ok(alice.client, URL, {"role": "user", "content": "start"})
    batch = [
        {"role": "user", "content": "q", "created_at": AT, "parent_id": root["id"]},
        {"role": "assistant", "content": "a", "created_at": AT},
    ]
    made = post_ok(alice.client, URL, {"entries": batch}, status=201)
    again = post_ok(alice.client, URL, {"entries": batch}, status=200)
    assert [e["id"] for e in again["entries"]] == [e["id"] for e in made["entries"]]
    assert again["active_leaf_id"] == made["entries"][1]["id"]
    longer = post_ok(alice.client, URL, {"entries": [*batch, {"role": "user", "content": "more"}]}, status=201)
    assert [e["id"] for e in longer["entries"][:2]] == [e["id"] for e in made["entries"]]
    assert longer["entries"][2]["parent_id"] == made["entries"][1]["id"]
    assert Entry.objects.filter(thread=thread).count() == 4


def test_a_batch_of_identical_turns_at_one_time_writes_every_one_and_asks_once_not_per_turn(
    alice: Caller, django_assert_max_num_queries: Any
) -> None:
    """An import dates its turns; the same words at the same time, one after the other, are new
    nodes (each under the one before), not a retry of the leaf, and only the first is looked up."""
    thread = _thread(alice)
    post_ok(alice.client, URL, {"role": "user", "content": "ok", "created_at": AT}, status=201)
    same = [{"role": "user", "content": "ok", "created_at": AT} for _ in range(60)]
    with django_assert_max_num_queries(30):
        made = post_ok(alice.client, URL, {"entries": same}, status=201)
    # The first of the batch is the leaf again (a retried single append); the 59 after it are new.
    assert len({e["id"] for e in made["entries"]}) == 60
    assert Entry.objects.filter(thread=thread).count() == 60


@pytest.mark.django_db(transaction=True)
def test_two_identical_appends_at_once_make_one_entry(alice: Caller) -> None:
    thread = _thread(alice)
    post_ok(alice.client, URL, {"role": "user", "content": "hello"})
    body = {"role": "assistant", "content": "at once", "created_at": AT}

    def append() -> Any:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {alice.key}")
        answer = client.post(URL, body, format="json")
        return answer.status_code, answer.json()["id"]

    outcomes = in_threads(append, append)
    assert sorted(code for code, _ in outcomes) == [200, 201]
    assert len({entry_id for _, entry_id in outcomes}) == 1
    assert Entry.objects.filter(thread=thread).count() == 2
    assert _leaf(thread) == outcomes[0][1]
