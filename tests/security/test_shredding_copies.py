"""Crypto-shredding that reaches every copy (issue 25 §6): with encryption on, each row holding a
person's words is sealed under her data key whoever owns it now (a fork of her thread handed to
another person, her message in another person's thread, a tool result quoting her, an item drawn
from her message, a summary of her turns), so once her erasure destroys that key none of them opens
from a copy made before, while the rows the service keeps still open with the live keys."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from governance.crypto.envelope import data_keys_of_person, key_set_ids
from governance.crypto.fields import text_open, value_aad
from governance.crypto.sealing import SealError, sealed_key_id
from governance.erasure.services import erasure_request_file
from governance.models import ErasureRequest
from memoryapp.items.services import item_approve
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Entry, Evidence, MemoryFileVersion, MemoryItem
from memoryapp.models.choices import EntryType, ItemStatus
from memoryapp.subjects.matching import PLACEHOLDER
from tests.kit.api import Caller, answered, post_entry, post_item, post_ok, post_thread, use_memory_tool
from tests.kit.crypto import K1, K2, keys_set

HER = "u-ines"
NAME = "Inês Valdomiro"
EMAIL = "ines.valdomiro@example.org"


def _raw(table: str, column: str, pk: str) -> str:
    """The value as the database (and so a dump of it) holds it."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column}::text FROM {table} WHERE id = %s", [pk])
        return str(cursor.fetchone()[0])


def _plant(alice: Caller) -> dict[str, tuple[str, str, str]]:
    """Her words in rows of others; answers (table, column, id) of each copy, by what it is."""
    answered(
        alice.client.put(f"/api/v1/users/{HER}/identifiers", {"names": [NAME], "emails": [EMAIL]}, format="json"), 200
    )
    # Her own thread, forked and the fork handed to Dora.
    post_thread(alice, "t-ines", user_id=HER)
    post_entry(alice, "t-ines", role="user", content="I hide the spare key under the Zanzibarquill pot.")
    reply = post_entry(alice, "t-ines", role="assistant", content="Noted: the key is under the Zanzibarquill pot.")
    post_ok(alice.client, "/api/v1/threads/t-ines/fork", {"entry_id": reply["id"], "new_thread_id": "t-dora"})
    post_thread(alice, "t-dora", user_id="u-dora", status=200)
    copies = list(Entry.objects.filter(thread__external_id="t-dora").order_by("seq").values_list("pk", flat=True))
    # Carl's thread: a tool result quoting her profile, then her message in it (its replies go with
    # it), an item drawn from it.
    post_thread(alice, "t-carl", user_id="u-carl")
    post_entry(alice, "t-carl", role="user", content="Carl likes green tea.")
    post_entry(
        alice,
        "t-carl",
        role="assistant",
        content="Looking her up.",
        tool_calls=[{"id": "c1", "name": "crm_lookup", "arguments": {"q": "ines"}}],
    )
    tool = post_entry(
        alice,
        "t-carl",
        type="tool_result",
        tool_call_id="c1",
        content=f"{NAME} <{EMAIL}>, born 1981, lives in Ribadouro.",
    )
    hers = post_entry(alice, "t-carl", role="user", content="My PIN is quokkaparade.", metadata={"userId": HER})
    item = post_item(
        alice,
        kind="fact",
        subject="Inês",
        attribute="pin",
        value="quokkaparade",
        user_id="u-carl",
        evidence=[{"entry_id": hers["id"], "quote": "My PIN is quokkaparade."}],
    )
    # A thread of Carl's where only she spoke, compacted: the summary holds her turns.
    post_thread(alice, "t-carl-2", user_id="u-carl")
    for n in range(3):
        post_entry(
            alice,
            "t-carl-2",
            role="user",
            content=f"Ines note {n}: Ribadouro gate code 48{n}.",
            metadata={"userId": HER},
        )
        post_entry(alice, "t-carl-2", role="assistant", content=f"Noted {n}.")
    with use_model(ScriptedModel(lambda system, messages: "She gave the Ribadouro gate codes.")):
        post_ok(
            alice.client,
            "/api/v1/threads/t-carl-2/compact",
            {"strategy": "summarize-old-preserve-recent", "preserve_recent_turns": 1, "async": False},
            status=(200, 201),
        )
    summary = Entry.objects.get(thread__external_id="t-carl-2", type=EntryType.COMPACTION)
    return {
        **{f"fork copy {n}": ("memoryapp_entry", "text", pk) for n, pk in enumerate(copies)},
        "her message in Carl's thread": ("memoryapp_entry", "text", hers["id"]),
        "item drawn from it": ("memoryapp_memoryitem", "value", item["id"]),
        "tool result quoting her": ("memoryapp_entry", "text", tool["id"]),
        "summary of her turns": ("memoryapp_entry", "text", summary.pk),
    }


@pytest.mark.django_db(transaction=True)
def test_every_copy_of_her_words_is_sealed_under_her_key_and_none_opens_after_her_erasure(
    encrypted: Any, alice: Caller, tmp_path: Path, settings: Any
) -> None:
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    rows = _plant(alice)
    her_keys = {k["id"] for k in data_keys_of_person(user_id=HER)}
    assert len(her_keys) == 1
    before = {what: _raw(*where) for what, where in rows.items()}
    for what, value in before.items():
        assert sealed_key_id(value) in her_keys, what
        assert text_open(value, aad=value_aad(*rows[what][:2]))  # opens while her key lives
    tool_id = rows["tool result quoting her"][2]

    request = erasure_request_file(user_id=HER, actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error

    # A copy made before the erasure: not one of those values opens with the keys that live now.
    for what, value in before.items():
        with pytest.raises(SealError):
            text_open(value, aad=value_aad(*rows[what][:2]))
    # What the service keeps of them opens: the tool result, her identifiers redacted, now
    # sealed under Carl's key; the rest went with her.
    kept = Entry.objects.get(pk=tool_id)
    assert PLACEHOLDER in kept.text and "Ribadouro" in kept.text and kept.words_of == ""
    assert sealed_key_id(_raw("memoryapp_entry", "text", tool_id)) not in her_keys
    assert not Entry.objects.filter(pk__in=[pk for _, _, pk in rows.values() if pk != tool_id]).exists()
    assert not MemoryItem.objects.filter(pk=rows["item drawn from it"][2]).exists()
    assert not Entry.objects.filter(words_of=HER).exists() and not MemoryItem.objects.filter(words_of=HER).exists()
    # The receipt says, measured, that these values no longer open in an old copy.
    backup = request.report["crypto_shredding"]["backup"]
    shut = {(r["table"], r["column"]): r["rows"] for r in backup["unopenable"]}
    assert shut[("memoryapp_entry", "text")] >= len([w for w in rows.values() if w[0] == "memoryapp_entry"])
    assert shut[("memoryapp_memoryitem", "value")] >= 1
    statement = request.report["crypto_shredding"]["statement"]
    # Her message's metadata is sealed with it (issue 25 §6): shut too, and named as such; who sent
    # it stays readable in clear (`sender`, the row's owner), named by table and column.
    assert shut[("memoryapp_entry", "metadata")] >= 1
    assert not [r for r in backup["readable"] if (r["table"], r["column"]) == ("memoryapp_entry", "metadata")]
    assert "memoryapp_entry.sender" in statement
    # and what encryption never seals, measured too: the rows' blind-index hashes and vectors.
    assert "memoryapp_entry.keyword_hashes" in statement
    assert {r["column"] for r in backup["unsealed"]} >= {"keyword_hashes"}
    assert json.dumps(request.report).count("quokkaparade") == 0


# --- rows naming several people -------------------------------------------------------------------

CARL, DORA, EVE = "u-carl", "u-dora", "u-eve"
PEOPLE = {DORA: "Dora Quillfeather", EVE: "Eve Marrowind"}


def _plant_several(alice: Caller) -> dict[str, tuple[str, str, str]]:
    """Rows naming Dora and Eve that are neither's: Carl's turn and a tool result in his thread, an
    agent-wide item, an entity named after Dora, a project file and a knowledge document."""
    for person, name in PEOPLE.items():
        answered(alice.client.put(f"/api/v1/users/{person}/identifiers", {"names": [name]}, format="json"), 200)
    post_thread(alice, "t-carl", user_id=CARL)
    turn = post_entry(
        alice, "t-carl", role="user", content="Dora Quillfeather and Eve Marrowind share the Zanzibarquill flat."
    )
    post_entry(
        alice,
        "t-carl",
        role="assistant",
        content="Looking them up.",
        tool_calls=[{"id": "c1", "name": "crm_lookup", "arguments": {"q": "flat"}}],
    )
    tool = post_entry(
        alice,
        "t-carl",
        type="tool_result",
        tool_call_id="c1",
        content="Dora Quillfeather, Eve Marrowind: tenants since 2019.",
    )
    item = post_item(
        alice,
        kind="fact",
        subject="flat",
        attribute="tenants",
        value="Dora Quillfeather, Eve Marrowind",
        evidence=[
            {"entry_id": turn["id"], "quote": "Dora Quillfeather and Eve Marrowind share the Zanzibarquill flat."}
        ],
    )
    quote = Evidence.objects.get(item_id=item["id"])
    about = post_item(alice, kind="fact", subject="Dora Quillfeather", attribute="pet", value="a quokka")
    entity_id = MemoryItem.objects.get(pk=about["id"]).entity_id
    assert entity_id
    create_memory_file_in(alice, "/memories/flat.md", "Tenants: Dora Quillfeather, Eve Marrowind\n")
    version = MemoryFileVersion.objects.get(path="/memories/flat.md")
    document = post_ok(
        alice.client, "/api/v1/knowledge", {"name": "tenants", "content": "Dora Quillfeather and Eve Marrowind."}
    )
    # A thread of Carl's where Dora and Eve spoke, compacted: the summary holds both one's words.
    post_thread(alice, "t-carl-2", user_id=CARL)
    for n, person in enumerate([DORA, EVE, DORA, EVE]):
        post_entry(
            alice, "t-carl-2", role="user", content=f"Flat note {n}: boiler code 91{n}.", metadata={"userId": person}
        )
        post_entry(alice, "t-carl-2", role="assistant", content=f"Noted {n}.")
    with use_model(ScriptedModel(lambda system, messages: "They gave the boiler codes.")):
        post_ok(
            alice.client,
            "/api/v1/threads/t-carl-2/compact",
            {"strategy": "summarize-old-preserve-recent", "preserve_recent_turns": 1, "async": False},
            status=(200, 201),
        )
    summary = Entry.objects.get(thread__external_id="t-carl-2", type=EntryType.COMPACTION)
    return {
        "a summary of both one's turns": ("memoryapp_entry", "text", summary.pk),
        "Carl's turn naming both": ("memoryapp_entry", "text", turn["id"]),
        "a tool result naming both": ("memoryapp_entry", "text", tool["id"]),
        "an agent-wide item naming both": ("memoryapp_memoryitem", "value", item["id"]),
        "its quote of Carl's turn": ("memoryapp_evidence", "quote", str(quote.pk)),
        "an entity named after Dora": ("memoryapp_entity", "name", entity_id),
        "a project file naming both": ("memoryapp_memoryfileversion", "content", version.pk),
        "a knowledge document naming both": ("memoryapp_knowledgedocument", "content", document["id"]),
    }


def create_memory_file_in(alice: Caller, path: str, text: str) -> None:
    status, answer = use_memory_tool(
        alice, {"command": "create", "path": path, "file_text": text}, "/api/v1/memory-tool?project_id=p-flat"
    )
    assert status == 201, answer


def _keys_of(person: str) -> set[str]:
    return {k["id"] for k in data_keys_of_person(user_id=person)}


@pytest.mark.parametrize("erased", [DORA, EVE])
@pytest.mark.django_db(transaction=True)
def test_a_row_naming_several_people_needs_each_ones_key_and_erasing_either_shreds_old_copies(
    encrypted: Any, alice: Caller, tmp_path: Path, settings: Any, erased: str
) -> None:
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    rows = _plant_several(alice)
    kept = EVE if erased == DORA else DORA
    before = {what: _raw(*where) for what, where in rows.items()}
    for what, value in before.items():
        needed = set(key_set_ids(sealed_key_id(value)))
        # Sealed under a key set holding the key of everyone it names (and of its owner).
        assert needed & _keys_of(DORA), what
        if what != "an entity named after Dora":
            assert needed & _keys_of(EVE), what
        assert text_open(value, aad=value_aad(*rows[what][:2]))  # opens while every key lives
    assert set(key_set_ids(sealed_key_id(before["Carl's turn naming both"]))) >= _keys_of(CARL)
    turn_id = rows["Carl's turn naming both"][2]
    assert Entry.objects.get(pk=turn_id).key_people == [DORA, EVE]

    request = erasure_request_file(user_id=erased, actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error

    # A copy made before: not one of the values naming the erased person opens any more, whoever of
    # the two it was (the entity names Dora only).
    for what, value in before.items():
        if what == "an entity named after Dora" and erased == EVE:
            assert text_open(value, aad=value_aad(*rows[what][:2]))
            continue
        with pytest.raises(SealError):
            text_open(value, aad=value_aad(*rows[what][:2]))
    # The service still reads the rows it keeps, the erased person redacted, sealed again under the
    # remaining people's keys (none of the erased person's).
    turn = Entry.objects.get(pk=turn_id)
    assert PLACEHOLDER in turn.text and PEOPLE[kept] in turn.text and PEOPLE[erased] not in turn.text
    assert turn.key_people == [kept]
    # The summary standing on the erased person's turns goes with them (the lineage cascades).
    assert not Entry.objects.filter(pk=rows["a summary of both one's turns"][2]).exists()
    for what, (table, column, pk) in rows.items():
        if what == "a summary of both one's turns" or (what == "an entity named after Dora" and erased == DORA):
            continue  # an entity named as the erased person goes
        now = _raw(table, column, pk)
        assert not set(key_set_ids(sealed_key_id(now))) & _keys_of(erased), what
        opened = text_open(now, aad=value_aad(table, column))
        assert PEOPLE[erased] not in opened, what
        assert what == "an entity named after Dora" or PEOPLE[kept] in opened, what
    assert request.report["counts"].get("key_sets_resealed", 0) >= 4
    # The receipt counts the old copies of those values among what no longer opens.
    backup = request.report["crypto_shredding"]["backup"]
    shut = {(r["table"], r["column"]) for r in backup["unopenable"]}
    planted = {(table, column) for table, column, _ in rows.values()}
    assert ("memoryapp_entry", "text") in shut and ("memoryapp_memoryitem", "value") in shut
    # ... and none of them among what such a copy still reads (measured, as the statement says): of
    # the entries the erasure touched, only the assistant's replies to her deleted turns (Carl's
    # words, under his key) still read there.
    readable = {(r["table"], r["column"]): r for r in backup["readable"]}
    assert not (planted - {("memoryapp_entry", "text")}) & set(readable), backup["readable"]
    replies = readable.get(("memoryapp_entry", "text"))
    assert replies is None or (replies["rows"] == 2 and replies["why"] == "sealed under another person's key"), replies
    assert json.dumps(request.report).count(PEOPLE[erased]) == 0


@pytest.mark.django_db(transaction=True)
def test_a_reviewers_edit_naming_a_registered_person_seals_the_item_under_her_key_too(
    encrypted: Any, alice: Caller
) -> None:
    answered(alice.client.put(f"/api/v1/users/{DORA}/identifiers", {"names": [PEOPLE[DORA]]}, format="json"), 200)
    written = post_item(alice, kind="fact", subject="flat", attribute="keys", value="with the porter")
    MemoryItem.objects.filter(pk=written["id"]).update(status=ItemStatus.SUGGESTED)
    item_approve(item=MemoryItem.objects.get(pk=written["id"]), actor="staff:pat", value="with Dora Quillfeather")
    item = MemoryItem.objects.get(pk=written["id"])
    assert item.key_people == [DORA] and item.value == "with Dora Quillfeather"
    assert set(key_set_ids(sealed_key_id(_raw("memoryapp_memoryitem", "value", item.pk)))) & _keys_of(DORA)


@pytest.mark.django_db(transaction=True)
def test_a_rotation_with_new_keys_seals_a_row_of_several_people_under_their_new_keys(
    encrypted: Any, alice: Caller, settings: Any
) -> None:
    for person, name in PEOPLE.items():
        answered(alice.client.put(f"/api/v1/users/{person}/identifiers", {"names": [name]}, format="json"), 200)
    post_thread(alice, "t-carl", user_id=CARL)
    turn = post_entry(alice, "t-carl", role="user", content="Dora Quillfeather and Eve Marrowind moved in.")
    before = set(key_set_ids(sealed_key_id(_raw("memoryapp_entry", "text", turn["id"]))))
    assert len(before) == 3
    keys_set(settings, f"{K2},{K1}")

    call_command("encryption_rotate", "--rekey", "--settle", "0", stdout=StringIO())

    after = set(key_set_ids(sealed_key_id(_raw("memoryapp_entry", "text", turn["id"]))))
    assert len(after) == 3 and not after & before
    assert after == {_live_key(p) for p in (CARL, DORA, EVE)}
    keys_set(settings, K2)
    assert Entry.objects.get(pk=turn["id"]).text == "Dora Quillfeather and Eve Marrowind moved in."


def _live_key(person: str) -> str:
    return next(str(k["id"]) for k in data_keys_of_person(user_id=person) if k["destroyed_at"] is None)


@pytest.mark.django_db(transaction=True)
def test_an_imported_turn_naming_a_registered_person_is_sealed_under_her_key_too(encrypted: Any, alice: Caller) -> None:
    """A thread import writes its turns in one statement: a turn of Carl's naming Dora is sealed
    under the key set of both, as the same turn appended is (her erasure shreds its old copies)."""
    answered(alice.client.put(f"/api/v1/users/{DORA}/identifiers", {"names": [PEOPLE[DORA]]}, format="json"), 200)
    header = {"type": "thread", "format": 2, "thread": {"id": "t-carl-imported", "user_id": CARL}}
    turn = {"role": "user", "content": f"{PEOPLE[DORA]} keeps the Zanzibarquill keys."}
    node = {"id": "n1", "parent": None, "seq": 1, "turn": turn}
    body = json.dumps(header) + "\n" + json.dumps({"type": "node", "node": node})
    answered(alice.client.post("/api/v1/threads/import", body, content_type="application/x-ndjson"), 201)
    entry = Entry.objects.get(thread__external_id="t-carl-imported")
    assert entry.key_people == [DORA]
    needed = set(key_set_ids(sealed_key_id(_raw("memoryapp_entry", "text", entry.pk))))
    assert needed & _keys_of(DORA) and needed & _keys_of(CARL)


@pytest.mark.django_db(transaction=True)
def test_an_entity_merged_with_one_named_after_a_registered_person_is_sealed_under_her_key_too(
    encrypted: Any, alice: Caller
) -> None:
    """A merge makes the merged entity's name an other name of the kept one: the kept entity names
    Dora now, so it is sealed under her key too (her erasure shreds its old copies)."""
    from memoryapp.graph.services import entity_merge
    from memoryapp.models import Entity, SubjectMention

    answered(alice.client.put(f"/api/v1/users/{DORA}/identifiers", {"names": [PEOPLE[DORA]]}, format="json"), 200)
    about_her = post_item(alice, kind="fact", subject=PEOPLE[DORA], attribute="pet", value="a quokka")
    about_flat = post_item(alice, kind="fact", subject="the tenant", attribute="rent", value="due monthly")
    merged = Entity.objects.get(pk=MemoryItem.objects.get(pk=about_her["id"]).entity_id)
    keep = Entity.objects.get(pk=MemoryItem.objects.get(pk=about_flat["id"]).entity_id)
    assert merged.key_people == [DORA] and not keep.key_people
    entity_merge(agent=alice.agent, keep=keep, merged=merged, actor="test")
    keep.refresh_from_db()
    assert PEOPLE[DORA] in keep.aliases
    assert keep.key_people == [DORA]
    needed = set(key_set_ids(sealed_key_id(json.loads(_raw("memoryapp_entity", "aliases", keep.pk)))))
    assert needed & _keys_of(DORA)
    assert SubjectMention.objects.filter(table=SubjectMention.Table.ENTITY, row_id=keep.pk, user_id=DORA).exists()


@pytest.mark.django_db(transaction=True)
def test_thread_metadata_naming_a_registered_person_is_sealed_under_her_key_too(
    encrypted: Any, alice: Caller, tmp_path: Path, settings: Any
) -> None:
    """Carl's thread whose metadata names Dora: sealed under the key set of both (as a turn of his
    naming her is), so a copy made before her erasure no longer opens; the live row still does."""
    from memoryapp.models import Thread

    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    for person, name in PEOPLE.items():
        answered(alice.client.put(f"/api/v1/users/{person}/identifiers", {"names": [name]}, format="json"), 200)
    post_thread(alice, "t-carl-meta", user_id=CARL, metadata={"landlord": PEOPLE[DORA], "plant": "a fern"})
    thread = Thread.objects.get(external_id="t-carl-meta")
    assert thread.key_people == [DORA]
    before = json.loads(_raw("memoryapp_thread", "metadata", str(thread.pk)))
    assert set(key_set_ids(sealed_key_id(before))) & _keys_of(DORA)
    # A later change naming Eve too: the set holds both.
    answered(
        alice.client.patch("/api/v1/threads/t-carl-meta", {"metadata": {"tenant": PEOPLE[EVE]}}, format="json"), 200
    )
    thread.refresh_from_db()
    assert thread.key_people == [DORA, EVE]

    request = erasure_request_file(user_id=DORA, actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    with pytest.raises(SealError):
        text_open(before, aad=value_aad("memoryapp_thread", "metadata"))
    thread = Thread.objects.get(external_id="t-carl-meta")
    assert thread.key_people == [EVE]
    assert thread.metadata["plant"] == "a fern" and PEOPLE[DORA] not in json.dumps(thread.metadata)
    now = json.loads(_raw("memoryapp_thread", "metadata", str(thread.pk)))
    assert not set(key_set_ids(sealed_key_id(now))) & _keys_of(DORA)


@pytest.mark.django_db(transaction=True)
def test_an_item_drawn_from_a_tool_result_quoting_her_keeps_a_readable_subject_after_her_erasure(
    encrypted: Any, alice: Caller, tmp_path: Path, settings: Any
) -> None:
    """An item in Carl's scope drawn from a tool result quoting her (sealed under her key, words_of)
    and naming her is redacted, not erased: what stays (its subject, its metadata) is sealed again
    under Carl's key before hers goes, so the service still opens it."""
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    answered(
        alice.client.put(f"/api/v1/users/{HER}/identifiers", {"names": [NAME], "emails": [EMAIL]}, format="json"), 200
    )
    post_thread(alice, "t-carl", user_id="u-carl")
    post_entry(
        alice,
        "t-carl",
        role="assistant",
        content="Looking her up.",
        tool_calls=[{"id": "c1", "name": "crm_lookup", "arguments": {"q": "ines"}}],
    )
    tool = post_entry(
        alice, "t-carl", type="tool_result", tool_call_id="c1", content=f"{NAME} <{EMAIL}>, lives in Ribadouro."
    )
    item = post_item(
        alice,
        kind="fact",
        subject="crm contact",
        attribute="town",
        value=f"{NAME} lives in Ribadouro",
        user_id="u-carl",
        metadata={"source": "crm"},
        evidence=[{"entry_id": tool["id"], "quote": "lives in Ribadouro"}],
    )
    her_keys = {k["id"] for k in data_keys_of_person(user_id=HER)}
    assert sealed_key_id(_raw("memoryapp_memoryitem", "subject", item["id"])) in her_keys

    request = erasure_request_file(user_id=HER, actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error

    kept = MemoryItem.objects.get(pk=item["id"])
    assert kept.subject == "crm contact" and kept.metadata.get("source") == "crm"
    for column in ("subject", "value", "metadata"):
        raw = _raw("memoryapp_memoryitem", column, item["id"]).strip('"')
        assert sealed_key_id(raw) not in her_keys, column
