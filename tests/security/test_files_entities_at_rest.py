"""Memory files, context documents and entity names with encryption on: sealed in the database,
whole through the API, the MCP resources and the admin; found by path and by name; the erasure
scan reads them; the rotation seals a database written with encryption off."""

from __future__ import annotations

import json
import re
import zipfile
from io import StringIO
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from governance.crypto.envelope import data_key_for
from governance.erasure.services import ID_PROBE, Probe, leftovers_scan
from governance.export import services as export
from governance.export.services import export_request_create, export_run
from memoryapp.files.access import FileAccess
from memoryapp.files.services import files_redact
from memoryapp.models import ConsolidationState, Entity, MemoryFileVersion, MemoryItem
from memoryapp.models.consolidation import ConsolidationPass
from tests.kit.admin import staff_client
from tests.kit.api import Caller, answered, create_memory_file, use_memory_tool
from tests.kit.crypto import K1, assert_none_planted, keys_set, pg_dump
from tests.kit.files import sha256_hex
from tests.kit.servers import database_conninfo

FILE_TEXT = "Ana keeps the obsidian-lantern at Quillfeather Harbour.\n"
DOCUMENT = "Always greet the plumbago-vortex crew first."
NAME = "Zanzibarquill Okonkwo"
ALIAS = "Marmalade Fjordson"


def _stored(sql: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


def _table_rows(dump: str, table: str) -> str:
    """The data lines of one table in a plain dump (its COPY block)."""
    found = re.search(rf"^COPY public\.{table} .*?^\\\.$", dump, flags=re.MULTILINE | re.DOTALL)
    assert found, f"no COPY block of {table} in the dump"
    return found.group(0)


def _mcp_read(client: Client, key: str, uri: str, query: str) -> Any:
    """An MCP resources/read through the in-process endpoint, as a client would send it."""
    message = {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri}}
    return client.post(
        f"/mcp/{query}",
        json.dumps(message),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
        HTTP_ACCEPT="application/json, text/event-stream",
        HTTP_MCP_PROTOCOL_VERSION="2025-06-18",
    )


def _item(caller: Caller, subject: str, attribute: str = "diet", value: str = "vegetarian") -> dict[str, Any]:
    body = {"kind": "preference", "subject": subject, "attribute": attribute, "value": value, "user_id": "u-ana"}
    return dict(answered(caller.client.post("/api/v1/items", body, format="json"), 201))


def test_file_versions_written_with_encryption_on_are_sealed_and_read_whole_everywhere(
    encrypted: Any, transactional_db: None, alice: Caller, client: Client
) -> None:
    created = create_memory_file(alice, "/memories/ana.md", FILE_TEXT)
    answered(
        alice.client.put("/api/v1/context-documents/AGENTS.md?project_id=p1", {"content": DOCUMENT}, format="json"),
        201,
    )

    dump = pg_dump(database_conninfo())
    assert "enc:v1:dk" in _table_rows(dump, "memoryapp_memoryfileversion")
    # Neither the text nor its sha256 (which would confirm a guessed text) is in the dump.
    assert_none_planted(dump, ["obsidian-lantern", "Quillfeather", "plumbago-vortex", sha256_hex(FILE_TEXT)])
    rows = _stored("SELECT content, sha256, size FROM memoryapp_memoryfileversion ORDER BY created_at")
    assert all(c.startswith("enc:v1:") and s.startswith("enc:v1:") for c, s, _ in rows)
    assert rows[0][2] == len(FILE_TEXT.encode())

    # The API: the sha256 of the plain text, the version whole, optimistic locking by sha256.
    assert created["sha256"] == sha256_hex(FILE_TEXT)
    version = answered(alice.client.get(f"/api/v1/memory-files/versions/{created['version_id']}?user_id=u-ana"), 200)
    assert version["content"] == FILE_TEXT
    listed = answered(alice.client.get("/api/v1/memory-files?user_id=u-ana"), 200)
    assert {f["path"]: f["sha256"] for f in listed["files"]}["/memories/ana.md"] == sha256_hex(FILE_TEXT)
    edit = {"command": "str_replace", "path": "/memories/ana.md", "old_str": "Ana", "new_str": "She"}
    status, changed = use_memory_tool(alice, {**edit, "expected_sha256": created["sha256"]})
    assert status == 200 and changed["sha256"] == sha256_hex(FILE_TEXT.replace("Ana", "She"))
    status, stale = use_memory_tool(alice, {**edit, "old_str": "She", "expected_sha256": created["sha256"]})
    assert (status, stale["error"]["code"]) == (409, "file_changed")
    document = answered(alice.client.get("/api/v1/context-documents/AGENTS.md?project_id=p1"), 200)
    assert document["content"] == DOCUMENT

    # The MCP resource and the admin's version page.
    answer = _mcp_read(client, alice.key, "memory://files/memories/ana.md", "?user_id=u-ana")
    assert answer.status_code == 200, answer.content
    assert answer.json()["result"]["contents"][0]["text"] == FILE_TEXT.replace("Ana", "She")
    staff = staff_client(username="eve", is_superuser=True)
    page = staff.get(reverse("admin:memoryapp_memoryfileversion_change", args=[created["version_id"]]))
    assert page.status_code == 200 and "obsidian-lantern at Quillfeather Harbour" in page.content.decode()


def test_entity_names_are_sealed_and_still_matched_by_name_through_their_keyed_hash(
    encrypted: Any, transactional_db: None, alice: Caller, bob: Caller
) -> None:
    first = _item(alice, NAME)
    again = _item(alice, "  zanzibarquill   OKONKWO ", attribute="city", value="Porto")
    entity = Entity.objects.get(agent=alice.agent)
    assert MemoryItem.objects.get(pk=first["id"]).entity_id == MemoryItem.objects.get(pk=again["id"]).entity_id
    entity.aliases = [ALIAS]
    entity.save()
    _item(bob, NAME)

    rows = _table_rows(pg_dump(database_conninfo()), "memoryapp_entity")
    assert_none_planted(rows, [NAME, ALIAS, "zanzibarquill", "okonkwo"])
    stored = _stored("SELECT name, normalized_name, aliases::text FROM memoryapp_entity ORDER BY agent_id")
    assert all(n.startswith("enc:v1:") and a.startswith('"enc:v1:') for n, _, a in stored)
    # Equal names hash alike within an agent only: the two agents' hashes differ.
    assert all(k.startswith("bh:") for _, k, _ in stored) and stored[0][1] != stored[1][1]
    assert (entity.name, Entity.objects.get(pk=entity.pk).aliases) == (NAME, [ALIAS])

    staff = staff_client(username="eve", is_superuser=True)
    change = staff.get(reverse("admin:memoryapp_entity_change", args=[entity.pk])).content.decode()
    assert NAME in change and ALIAS in change
    overview = staff.get(reverse("admin:memoryapp_entityoverview_change", args=[entity.pk])).content.decode()
    assert NAME in overview and ALIAS in overview
    changelist = reverse("admin:memoryapp_entity_changelist")
    found = staff.get(changelist, {"q": "zanzibarquill okonkwo", "agent__id__exact": alice.agent.pk})
    assert found.status_code == 200 and NAME in found.content.decode()
    assert found.context["cl"].result_count == 1
    assert staff.get(changelist, {"q": "okonkwo"}).context["cl"].result_count == 0  # a whole name, not a part
    assert staff.get(changelist, {"q": "zanzibarquill okonkwo"}).context["cl"].result_count == 2  # both agents'


def test_the_erasure_scan_opens_sealed_rows_finds_what_is_left_and_never_reports_ciphertext(
    encrypted: Any, db: None, alice: Caller
) -> None:
    create_memory_file(alice, "/memories/ana.md", FILE_TEXT)
    _item(alice, NAME)
    key_id = data_key_for(agent_id=alice.agent.pk, user_id="u-ana").id
    probes = [
        Probe(ID_PROBE, "u-ana", True),
        Probe("sample 1", "obsidian-lantern at Quillfeather", False),
        Probe("identifier 1", NAME, False),
        # Every sealed value names its data key: ciphertext must never count as a finding.
        Probe("identifier 2", key_id, False),
    ]

    scan = leftovers_scan(probes=probes, agent_ids=[alice.agent.pk])

    by_table: dict[str, set[str]] = {}
    for finding in scan["findings"]:
        by_table.setdefault(finding["table"], set()).update(finding["probes"])
    assert by_table["memoryapp_memoryfileversion"] == {ID_PROBE, "sample 1"}
    assert by_table["memoryapp_entity"] == {ID_PROBE, "identifier 1"}
    assert not any("identifier 2" in f["probes"] for f in scan["findings"])


def test_an_export_of_the_person_holds_their_files_and_entity_names_whole(
    encrypted: Any, db: None, settings: Any, tmp_path: Path, alice: Caller
) -> None:
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.VAR_DIR = tmp_path / "var"  # the receipt key is generated there
    settings.RECEIPT_SIGNING_KEY = settings.RECEIPT_SIGNING_KEY_FILE = ""
    created = create_memory_file(alice, "/memories/ana.md", FILE_TEXT)
    entity_id = MemoryItem.objects.get(pk=_item(alice, NAME)["id"]).entity_id

    request = export_request_create(user_id="u-ana", agent_ids=[], actor="staff:officer")
    export_run(request_id=request.pk)

    request.refresh_from_db()
    path = export.export_archive_path(request)
    assert path is not None, request.error
    with zipfile.ZipFile(path) as archive:
        versions = [json.loads(line)["file_version"] for line in archive.read("files.jsonl").splitlines() if line]
        entities = [json.loads(line)["entity"] for line in archive.read("entities.jsonl").splitlines() if line]
    assert [(v["id"], v["content"], v["sha256"]) for v in versions] == [
        (created["version_id"], FILE_TEXT, sha256_hex(FILE_TEXT))
    ]
    assert [(e["id"], e["name"]) for e in entities] == [(entity_id, NAME)]


def test_a_redaction_with_encryption_on_seals_the_redacted_text_under_the_persons_key(
    encrypted: Any, db: None, alice: Caller
) -> None:
    create_memory_file(alice, "/memories/ana.md", FILE_TEXT)
    access = FileAccess(agent=alice.agent, user_id="u-ana", actor="test")

    report = files_redact(access=access, paths=["/memories/ana.md"])
    again = files_redact(access=access, paths=["/memories/ana.md"])

    assert (report.versions, again.versions) == (1, 0)
    person_key = data_key_for(agent_id=alice.agent.pk, user_id="u-ana").id
    redacted = MemoryFileVersion.objects.filter(redacted_at__isnull=False)
    assert [(v.content, v.sha256) for v in redacted] == [("[redacted]", sha256_hex("[redacted]"))]
    ((content, sha),) = _stored("SELECT content, sha256 FROM memoryapp_memoryfileversion WHERE redacted_at IS NOT NULL")
    assert content.startswith(f"enc:v1:{person_key}:") and sha.startswith(f"enc:v1:{person_key}:")


def test_rotation_seals_files_entities_and_consolidation_state_written_with_encryption_off(
    encrypted: Any, transactional_db: None, settings: Any, alice: Caller
) -> None:
    keys_set(settings, "")
    created = create_memory_file(alice, "/memories/ana.md", FILE_TEXT)
    _item(alice, NAME)
    ConsolidationState.objects.create(
        agent=alice.agent, user_id="u-ana", pass_kind=ConsolidationPass.FOLD, details={"draft_base": "f" * 64}
    )
    assert Entity.objects.get().normalized_name == "zanzibarquill okonkwo"
    assert "obsidian-lantern" in pg_dump(database_conninfo())

    keys_set(settings, K1)
    out = StringIO()
    call_command("encryption_rotate", stdout=out)
    result = json.loads(out.getvalue())

    assert result["rows_resealed"]["memoryapp_memoryfileversion"] == 1
    assert result["rows_resealed"]["memoryapp_entity"] == 1
    assert result["rows_resealed"]["memoryapp_consolidationstate"] == 1
    dump = pg_dump(database_conninfo())
    assert_none_planted(dump, ["obsidian-lantern", "Quillfeather", sha256_hex(FILE_TEXT), "f" * 64])
    assert_none_planted(_table_rows(dump, "memoryapp_entity"), [NAME, "zanzibarquill"])
    assert Entity.objects.get().normalized_name.startswith("bh:")
    # Found by name after the rotation: the same entity, not a second one.
    _item(alice, NAME.upper(), attribute="city", value="Porto")
    assert Entity.objects.count() == 1 and MemoryItem.objects.filter(entity__isnull=False).count() == 2
    status, _ = use_memory_tool(
        alice,
        {
            "command": "str_replace",
            "path": "/memories/ana.md",
            "old_str": "Ana",
            "new_str": "She",
            "expected_sha256": created["sha256"],
        },
    )
    assert status == 200
    assert ConsolidationState.objects.get().details == {"draft_base": "f" * 64}
    assert sum(json.loads(_rotate_again())["rows_resealed"].values()) == 0


def _rotate_again() -> str:
    out = StringIO()
    call_command("encryption_rotate", stdout=out)
    return out.getvalue()
