"""One rule for person ids (`user_id`), checked wherever one comes in, so every person the service
stores is one `POST /api/v1/users/{user_id}/forget` can name (issue 23: a `/` or a newline, taken by
the threads API, made that person unreachable by the route)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client

from memoryapp.models import Entry, MemoryFileVersion, MemoryItem, Thread
from tests.kit.api import Caller, error_of, import_jsonl, jsonl_node, post_entry, post_thread

pytestmark = pytest.mark.django_db

BAD_PERSON_IDS = ["a/b", "a\nb", "line\n", "tab\there", " ana", "ana ", ".", "..", "x" * 129, "bell\x07"]
# E-mail addresses, names and any script stay person ids, reachable once percent-encoded.
GOOD_PERSON_IDS = ["ana@example.com", "Ana María López", "u+1%2F", "名前", "a.b:c~d"]


def refused(response: Any, field: str = "user_id") -> None:
    error = error_of(response)
    assert error["field"] == field, error
    assert error["code"] in ("invalid_person_id", "too_long", "invalid_scope"), error


@pytest.mark.parametrize("person", BAD_PERSON_IDS)
def test_a_person_id_outside_the_rule_is_a_400_naming_the_field_at_every_way_in_and_writes_nothing(
    alice: Caller, client: Client, person: str
) -> None:
    api = alice.client
    refused(api.post("/api/v1/threads", {"id": "t-p", "user_id": person}, format="json"))
    post_thread(alice, "t-ok", status=201)
    refused(api.patch("/api/v1/threads/t-ok", {"user_id": person}, format="json"))
    refused(
        api.post(
            "/api/v1/items",
            {"kind": "fact", "subject": "Ana", "attribute": "city", "value": "Lisbon", "user_id": person},
            format="json",
        )
    )
    refused(
        api.post(
            "/api/v1/memory-tools",
            {"name": "remember", "input": {"key": "tea", "value": "green"}, "user_id": person},
            format="json",
        )
    )
    refused(
        api.post(
            f"/api/v1/memory-tool?user_id={quote(person, safe='')}",
            {"command": "create", "path": "/memories/a.md", "file_text": "x"},
            format="json",
        )
    )
    # Who wrote a message, and who wrote in a thread: person ids too (a person's erasure looks for them).
    refused(
        api.post(
            "/api/v1/threads/t-ok/entries",
            {"role": "user", "content": "hi", "metadata": {"userId": person}},
            format="json",
        ),
        "metadata.userId",
    )
    refused(
        api.patch("/api/v1/threads/t-ok", {"metadata": {"memoryUserIds": ["ana", person]}}, format="json"),
        "metadata.memoryUserIds[1]",
    )
    header = json.dumps({"type": "thread", "format": 2, "thread": {"id": "t-imported", "user_id": person}})
    refused(import_jsonl(alice, [header, jsonl_node("e1")]))
    mcp = client.post(
        f"/mcp/?user_id={quote(person, safe='')}",
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {alice.key}",
        HTTP_ACCEPT="application/json, text/event-stream",
    )
    refused(mcp)
    forget = api.post(f"/api/v1/users/{quote(person, safe='')}/forget", {}, format="json")
    if "/" in person:  # a path that names no route
        assert error_of(forget, 404)["code"] == "not_found"
    else:
        refused(forget)

    assert list(Thread.objects.values_list("external_id", "user_id")) == [("t-ok", "")]
    assert not Entry.objects.exists()
    assert not MemoryItem.objects.exists() and not MemoryFileVersion.objects.exists()


@pytest.mark.parametrize("person", GOOD_PERSON_IDS)
def test_every_person_id_the_api_takes_is_one_forget_reaches(alice: Caller, person: str) -> None:
    post_thread(alice, "t-about", status=201, user_id=person)
    post_entry(alice, "t-about", role="user", content="I live in Lisbon")
    post_thread(alice, "t-other", status=201)
    post_entry(alice, "t-other", role="user", content="hello from them", metadata={"userId": person})
    answer = alice.client.post(f"/api/v1/users/{quote(person, safe='')}/forget", {}, format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["user_id"] == person
    assert body["counts"]["threads"] == 1 and body["counts"]["entries_deleted"] >= 2
    assert list(Thread.objects.values_list("external_id", flat=True)) == ["t-other"]
