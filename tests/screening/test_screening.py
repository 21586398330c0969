"""Screening at write (issue 25 §3): each category found, each action applied, over every write path
the agent API has, and each decision in the audit chain without the text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection

from governance.models import AuditRecord
from memoryapp.extraction.services import extraction_run
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Entry, MemoryFileVersion, MemoryItem, Thread
from memoryapp.search import embedders
from memoryapp.search.indexing import embed_pending
from memoryapp.threads.hashing import content_hash, hashed_turn
from memoryapp.threads.validation import entry_text
from tests.kit.api import (
    MEMORY_TOOL,
    THREADS,
    Caller,
    answered,
    error_of,
    get_ok,
    patch_ok,
    post_ok,
    post_thread,
    use_memory_tool,
)

SETTINGS = "/api/v1/settings/screening"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLE"
CARD = "4111 1111 1111 1111"
EMAIL = "Ines.Valdomiro@example.com"

# One sample of each category, as it would stand in a turn, and the placeholder a redaction leaves.
SAMPLES = {
    "email": f"write to {EMAIL} please",
    "phone": "call me on +351 912 345 678 tonight",
    "payment_card": f"my card is {CARD} thanks",
    "iban": "pay into GB82 WEST 1234 5698 7654 32 today",
    "national_id": "my SSN is 536-22-8173 for the form",
    "ip_address": "the server is at 192.168.14.27 now",
    "secret": f"use the token {GITHUB_TOKEN} for the repo",
}


def screening_set(caller: Caller, **policy: str) -> dict[str, Any]:
    return patch_ok(caller.client, SETTINGS, policy)


def append(caller: Caller, thread_id: str, content: str, status: int = 201, **more: Any) -> Any:
    post_thread(caller, thread_id)
    return answered(
        caller.client.post(
            f"{THREADS}/{thread_id}/entries", {"role": "user", "content": content, **more}, format="json"
        ),
        status,
    )


def screened_records(caller: Caller) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(agent_id=caller.agent.pk, action__startswith="screening.").order_by("seq"))


def test_the_default_policy_refuses_secrets_redacts_cards_and_allows_the_rest(alice: Caller) -> None:
    policy = get_ok(alice.client, SETTINGS)
    assert policy == {
        "email": "allow",
        "phone": "allow",
        "payment_card": "redact",
        "iban": "allow",
        "national_id": "allow",
        "ip_address": "allow",
        "secret": "refuse",
        "person": "allow",
    }
    append(alice, "t-1", SAMPLES["email"])
    assert Entry.objects.get(thread__external_id="t-1").text == SAMPLES["email"]
    append(alice, "t-1", SAMPLES["payment_card"])
    assert Entry.objects.filter(text="my card is [payment_card] thanks").count() == 1
    error = error_of(
        alice.client.post(f"{THREADS}/t-1/entries", {"role": "user", "content": SAMPLES["secret"]}, format="json"),
        422,
    )
    assert (error["code"], error["field"]) == ("sensitive_data", "content")
    assert "secret" in error["message"] and GITHUB_TOKEN not in error["message"]
    assert Entry.objects.filter(thread__external_id="t-1").count() == 2


@pytest.mark.parametrize("category", sorted(SAMPLES))
def test_each_category_is_redacted_to_its_placeholder_when_the_policy_says_redact(alice: Caller, category: str) -> None:
    screening_set(alice, **{category: "redact"})
    append(alice, "t-r", SAMPLES[category])
    entry = Entry.objects.get(thread__external_id="t-r")
    assert f"[{category}]" in entry.text and entry.content == entry.text
    record = screened_records(alice)[-1]
    assert record.action == "screening.screened"
    assert {"category": category, "action": "redact", "field": "content"} in record.details["decisions"]
    assert SAMPLES[category] not in json.dumps(record.details)


def test_a_redacted_turn_is_stored_with_the_text_and_hash_of_what_stays(alice: Caller) -> None:
    """A plain message's text and hash are made the short way (`content_hash_plain`), the others'
    from their turn: each as an entry made from the stored values would have them."""
    screening_set(alice, email="redact", phone="redact")
    post_thread(alice, "t-h")
    call = {"id": "c1", "name": "lookup", "arguments": {"q": SAMPLES["email"]}}
    entries = [
        {"role": "user", "content": SAMPLES["email"]},
        {"role": "assistant", "content": SAMPLES["phone"], "tool_calls": [call]},
        {"type": "tool_result", "tool_call_id": "c1", "content": SAMPLES["phone"]},
        {"role": "assistant", "content": [{"type": "text", "text": SAMPLES["email"]}]},
        {"role": "user", "content": "no one named here"},
    ]
    post_ok(alice.client, f"{THREADS}/t-h/entries", {"entries": entries})
    stored = list(Entry.objects.filter(thread__external_id="t-h").order_by("seq"))
    assert [e.content if isinstance(e.content, str) else e.content[0]["text"] for e in stored] == [
        "write to [email] please",
        "call me on [phone] tonight",
        "call me on [phone] tonight",
        "write to [email] please",
        "no one named here",
    ]
    assert stored[1].tool_calls[0]["arguments"] == {"q": "write to [email] please"}
    for entry in stored:
        assert entry.text == entry_text(content=entry.content, tool_calls=entry.tool_calls)
        turn = hashed_turn(entry)
        assert entry.content_hash == content_hash(parent_id=entry.parent_id, turn=turn, created_at=entry.created_at)


@pytest.mark.parametrize("category", sorted(SAMPLES))
def test_each_category_is_refused_with_a_422_naming_it_and_the_field_and_nothing_is_stored(
    alice: Caller, category: str
) -> None:
    screening_set(alice, **{category: "refuse"})
    post_thread(alice, "t-x")
    body = {"entries": [{"role": "user", "content": "hello"}, {"role": "user", "content": SAMPLES[category]}]}
    error = error_of(alice.client.post(f"{THREADS}/t-x/entries", body, format="json"), 422)
    assert error["code"] == "sensitive_data" and error["field"] == "entries[1].content"
    assert f"({category})" in error["message"]
    assert Entry.objects.filter(thread__external_id="t-x").count() == 0
    refused = screened_records(alice)[-1]
    assert refused.action == "screening.refused"
    assert refused.details == {"category": category, "action": "refuse", "field": "entries[1].content"}


@pytest.mark.parametrize("category", sorted(SAMPLES))
def test_each_category_is_stored_as_it_is_when_allowed(alice: Caller, category: str) -> None:
    screening_set(alice, **{category: "allow"})
    append(alice, "t-a", SAMPLES[category])
    assert Entry.objects.get(thread__external_id="t-a").text == SAMPLES[category]


def test_secrets_of_several_kinds_are_found(alice: Caller) -> None:
    post_thread(alice, "t-s")
    for text in (
        f"aws key {AWS_KEY}",
        "db password=hunter2hunter2 in the config",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        "connect to https://bob:s3cr3tpw@db.example.org/app",
        # The keyword forms in any case (the detector matches them case-insensitively).
        'settings: API_KEY = "k3y-value-1"',
        "she wrote: my Password: 'hunter2'",
        "x Secret=abcdef",
        # Credentials detect-secrets has no plugin for (memoryapp.screening.recognizers).
        "curl -H 'Authorization: Bearer abc.def.ghi' https://api.example.org",
        "the key AIzaSyA-1234567890abcdefghijklmnopqrstu in the app",
        "ANTHROPIC_KEY sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
        "login with hf_abcdefghijklmnopqrstuvwxyz0123456789",
    ):
        error = error_of(
            alice.client.post(f"{THREADS}/t-s/entries", {"role": "user", "content": text}, format="json"), 422
        )
        assert error["code"] == "sensitive_data", text
    screening_set(alice, secret="redact")
    post_ok(
        alice.client,
        f"{THREADS}/t-s/entries",
        {
            "role": "user",
            "content": "key: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY----- end",
        },
    )
    assert Entry.objects.get(thread__external_id="t-s").text == "key: [secret] end"


def test_a_bearer_token_is_redacted_and_the_bearer_of_news_is_prose(alice: Caller) -> None:
    screening_set(alice, secret="redact")
    append(alice, "t-b", "send Authorization: Bearer 9f8e7d6c1b2a with it")
    append(alice, "t-b", "He was the bearer of bad news, and bearer bonds are gone.")
    texts = list(Entry.objects.filter(thread__external_id="t-b").order_by("seq").values_list("text", flat=True))
    assert texts == [
        "send Authorization: Bearer [secret] with it",
        "He was the bearer of bad news, and bearer bonds are gone.",
    ]


def test_a_card_number_failing_luhn_and_ordinary_prose_are_left_alone(alice: Caller) -> None:
    screening_set(alice, **dict.fromkeys(SAMPLES, "refuse"))
    text = "Order 4111 1111 1111 1112 shipped; we met at 10:30 in room 12 and talked about the garden."
    append(alice, "t-p", text)
    assert Entry.objects.get(thread__external_id="t-p").text == text


def test_a_bad_policy_is_a_400_naming_the_field_and_changes_nothing(alice: Caller) -> None:
    for body, field in (({"email": "shred"}, "email"), ({"emails": "redact"}, "emails"), ({"secret": 1}, "secret")):
        error = error_of(alice.client.patch(SETTINGS, body, format="json"), 400)
        assert error["field"] == field, body
    assert get_ok(alice.client, SETTINGS)["email"] == "allow"
    assert not AuditRecord.objects.filter(action="screening.policy_set").exists()


def test_a_policy_change_is_audited_with_what_changed_and_is_the_agents_own(alice: Caller, bob: Caller) -> None:
    assert screening_set(alice, email="redact", phone="hold")["email"] == "redact"
    record = AuditRecord.objects.get(action="screening.policy_set")
    assert record.details == {"changed": {"email": "redact", "phone": "hold"}} and record.agent_id == alice.agent.pk
    assert get_ok(bob.client, SETTINGS)["email"] == "allow"
    append(bob, "t-b", SAMPLES["email"])
    assert Entry.objects.get(agent=bob.agent).text == SAMPLES["email"]


def test_a_redacted_email_never_reaches_the_embedder_the_model_or_the_keyword_index(
    alice: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    screening_set(alice, email="redact")
    post_thread(alice, "t-e", user_id="ines")
    post_ok(
        alice.client,
        f"{THREADS}/t-e/entries",
        {
            "entries": [
                {"role": "user", "content": f"My address is {EMAIL}, I moved to Porto.", "metadata": {"from": EMAIL}},
                {
                    "role": "assistant",
                    "content": "Saving it.",
                    "tool_calls": [{"id": "c1", "name": "save", "arguments": {"email": EMAIL}}],
                },
                {"type": "tool_result", "tool_call_id": "c1", "content": f"saved {EMAIL}"},
            ]
        },
    )
    real = embedders.embedder()
    embedded: list[str] = []

    class Recording:
        name, dimensions = real.name, real.dimensions

        def embed(self, texts: list[str]) -> list[list[float]]:
            embedded.extend(texts)
            return real.embed(texts)

    monkeypatch.setattr(embedders, "embedder", lambda: Recording())
    embed_pending(agent_id=alice.agent.pk)
    model = ScriptedModel(lambda system, messages: "[]")
    with use_model(model):
        extraction_run(thread=Thread.objects.get(agent=alice.agent, external_id="t-e"))
    sent = json.dumps([[call.system, call.messages] for call in model.calls], default=str)
    assert embedded and model.calls
    lowered = EMAIL.lower()
    assert lowered not in " ".join(embedded).lower() and lowered not in sent.lower()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT search_vector::text, content::text, tool_calls::text, metadata::text, text FROM memoryapp_entry"
        )
        stored = json.dumps(cursor.fetchall()).lower()
    assert "[email]" in stored and lowered not in stored and "valdomiro" not in stored


def test_thread_metadata_items_facts_and_files_are_screened_too(alice: Caller) -> None:
    screening_set(alice, email="redact", phone="refuse")
    post_thread(alice, "t-m", metadata={"contact": EMAIL})
    assert Thread.objects.get(external_id="t-m").metadata == {"contact": "[email]"}
    post_ok(
        alice.client,
        "/api/v1/items",
        {"kind": "fact", "subject": "Ines", "attribute": "email", "value": f"Her e-mail is {EMAIL}"},
    )
    assert MemoryItem.objects.get(agent=alice.agent, attribute="email").value == "Her e-mail is [email]"
    status, body = use_memory_tool(
        alice, {"command": "create", "path": "/memories/contacts.md", "file_text": f"Ines: {EMAIL}\n"}
    )
    assert status == 201, body
    assert MemoryFileVersion.objects.get(path="/memories/contacts.md").content == "Ines: [email]\n"
    error = error_of(
        alice.client.put("/api/v1/facts/users/ines/phone", {"value": "+351 912 345 678"}, format="json"), 422
    )
    assert (error["code"], error["field"]) == ("sensitive_data", "value")
    answered(alice.client.put("/api/v1/facts/users/ines/email", {"value": EMAIL}, format="json"), 200)
    assert get_ok(alice.client, "/api/v1/facts/users/ines/email")["value"] == "[email]"
    status, body = use_memory_tool(
        alice, {"command": "create", "path": "/memories/phone.md", "file_text": "call +351 912 345 678\n"}
    )
    assert status == 422 and body["error"]["code"] == "sensitive_data", body
    assert not MemoryFileVersion.objects.filter(path="/memories/phone.md").exists()


def test_a_file_write_that_would_be_held_is_refused_as_files_have_no_review(alice: Caller) -> None:
    screening_set(alice, email="hold")
    status, body = use_memory_tool(
        alice, {"command": "create", "path": "/memories/c.md", "file_text": f"mail {EMAIL}\n"}, url=MEMORY_TOOL
    )
    assert status == 422 and body["error"]["field"] == "content"
    assert "cannot be held" in body["error"]["message"]


def test_an_import_is_screened_a_secret_refused_naming_its_node_and_an_email_redacted(alice: Caller) -> None:
    from tests.kit.api import import_jsonl

    def node(node_id: str, parent: str | None, content: str, seq: int) -> str:
        turn = {"role": "user", "content": content}
        return json.dumps({"type": "node", "node": {"id": node_id, "parent": parent, "turn": turn, "seq": seq}})

    leaky = [node("n1", None, "hello", 1), node("n2", "n1", SAMPLES["secret"], 2)]
    response = import_jsonl(alice, leaky, "?id=t-imp")
    assert response.status_code == 422, response.content
    assert (response.json()["error"]["code"], response.json()["error"]["field"]) == (
        "sensitive_data",
        "nodes[1].content",
    )
    assert not Thread.objects.filter(external_id="t-imp").exists()
    screening_set(alice, email="redact")
    header = json.dumps({"type": "thread", "format": 2, "thread": {"metadata": {"owner": EMAIL}}})
    response = import_jsonl(alice, [header, node("n1", None, SAMPLES["email"], 1)], "?id=t-imp")
    assert response.status_code == 201, response.content
    assert Entry.objects.get(thread__external_id="t-imp").text == "write to [email] please"
    assert Thread.objects.get(external_id="t-imp").metadata == {"owner": "[email]"}


def test_a_turns_sender_name_and_an_events_payload_are_screened_and_empty_fields_stay_as_sent(alice: Caller) -> None:
    screening_set(alice, email="redact", secret="refuse")
    post_thread(alice, "t-fields")
    post_ok(
        alice.client,
        f"{THREADS}/t-fields/entries",
        {
            "entries": [
                {"role": "user", "content": "Hello there.", "sender_name": f"Ines <{EMAIL}>"},
                {"type": "custom", "event": {"note": f"forwarded to {EMAIL}", "n": 3}},
                {"role": "user", "content": "Plain.", "metadata": {}, "tool_calls": [], "sender_name": ""},
            ]
        },
    )
    named, event, plain = Entry.objects.filter(thread__external_id="t-fields").order_by("seq")
    assert named.sender_name == "Ines <[email]>" and named.content == "Hello there."
    assert event.event == {"note": "forwarded to [email]", "n": 3}
    assert (plain.content, plain.metadata, plain.tool_calls, plain.sender_name) == ("Plain.", {}, None, "")
    refused = append(alice, "t-fields", "Hi.", status=422, sender_name=f"bot {GITHUB_TOKEN}")
    assert refused["error"]["code"] == "sensitive_data" and refused["error"]["field"] == "sender_name"
