"""The audit trail names a person and their threads by keyed pseudonyms (governance.audit.pseudonyms):
staff pages show the ids while the person's secret lives; the person's erasure (the agent's
`forget`, a staff request) deletes the secret, so no record links to them any more, and the chain
still verifies (the pseudonym is what was hashed)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from governance.audit.chain import audit_verify
from governance.erasure.services import erasure_request_file
from governance.models import AuditRecord, ErasureRequest
from tests.kit.admin import staff_client
from tests.kit.api import Caller, answered, post_entry, post_item, post_ok, post_thread

pytestmark = pytest.mark.django_db

PERSON = "p-ines-5t"
THREAD = f"trip:{PERSON}"
FORK = f"copy:{PERSON}"
AUDIT = "/admin/governance/auditrecord/"
# The bookkeeping tables: none may name her once she is erased (the erasure request itself keeps
# what the officer typed, the one row allowed to).
BOOKKEEPING = (
    "governance_auditrecord",
    "memoryapp_event",
    "memoryapp_accesslog",
    "governance_jobrun",
    "django_admin_log",
)


def plant(caller: Caller) -> None:
    post_thread(caller, THREAD, user_id=PERSON)
    first = post_entry(caller, THREAD, role="user", content="Book the night train to Porto.")
    post_entry(caller, THREAD, role="assistant", content="Booked.")
    post_item(caller, kind="fact", subject="travel", attribute="prefers", value="night trains", user_id=PERSON)
    post_ok(caller.client, f"/api/v1/threads/{THREAD}/fork", {"entry_id": first["id"], "new_thread_id": FORK})
    caller.client.get("/api/v1/search", {"query": "train", "user_id": PERSON})


def naming(needle: str, tables: tuple[str, ...]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(
                f'SELECT row_to_json(t)::text FROM "{table}" t WHERE row_to_json(t)::text ILIKE %s', [f"%{needle}%"]
            )
            rows = [r[0][:240] for r in cursor.fetchall()]
            if rows:
                found[table] = rows
    return found


def auditor(name: str) -> Any:
    return staff_client(username=name, groups=("Privacy officers",))


def test_the_audit_names_the_person_by_pseudonym_and_staff_see_the_id_until_the_agent_forgets_her(
    alice: Caller,
) -> None:
    plant(alice)
    assert AuditRecord.objects.filter(action="thread.fork").exists()
    assert naming(PERSON, ("governance_auditrecord",)) == {}
    page = auditor("pat").get(AUDIT).content.decode()
    assert THREAD in page and FORK in page

    answered(alice.client.post(f"/api/v1/users/{PERSON}/forget", {}, format="json"), 200)

    assert naming(PERSON, BOOKKEEPING) == {}
    assert audit_verify().ok
    page = auditor("quinn").get(AUDIT).content.decode()
    assert PERSON not in page and "erased person" in page


def test_after_a_staff_erasure_no_bookkeeping_table_names_the_person_and_the_chain_verifies(
    alice: Caller, bob: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    plant(alice)
    plant(bob)
    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id=PERSON, actor="staff:pat")
    request.refresh_from_db()

    assert request.status == ErasureRequest.Status.DONE, request.error
    assert naming(PERSON, BOOKKEEPING) == {}
    assert audit_verify().ok


def test_every_audit_record_naming_a_thread_names_its_person_too() -> None:
    """The rule in code: each `audit_append`, `AuditEntry` and `lineage_audit` of the service that
    names a thread (`thread_id=`) says whose it is (`person=`), so the thread's client-chosen id is
    written as that person's pseudonym and their erasure unlinks it. Found missing by issue 25's
    capstone test (compaction, extraction, holds, screening, prunes, cascades, consolidation)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    missing = []
    for package in ("memoryapp", "governance"):
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name not in ("audit_append", "AuditEntry", "lineage_audit"):
                    continue
                given = {k.arg: ast.unparse(k.value) for k in node.keywords}
                if given.get("thread_id", '""') not in ('""', "''") and "person" not in given:
                    missing.append(f"{path.relative_to(root)}:{node.lineno}")
    assert missing == []
