"""Erasure requests: filed by a privacy officer, run as a job, proved by a report.

The job runs as the service runs it: sent after the request's commit (eager in tests), through
`person_erase`, then the leftover scan over every table holding content.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.utils import timezone

from governance.audit.chain import audit_verify, canonical_json
from governance.erasure import services as erasure
from governance.erasure.services import (
    NOT_SCANNED,
    erasure_request_file,
    erasure_request_retry,
    leftovers_scan,
    probes_take,
    report_sha256,
    sample_of,
    tables_to_scan,
)
from governance.models import AuditRecord, ErasureRequest, JobRun
from governance.receipts import receipt_verify
from memoryapp.errors import DomainError
from memoryapp.models import Agent, Entry, Event, LegalHold, MemoryFileVersion, MemoryItem, Thread
from tests.kit.factories import (
    AgentFactory,
    EntryFactory,
    MemoryFileVersionFactory,
    MemoryItemFactory,
    ThreadFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def signing_key_of_this_test(tmp_path: Path, settings: Any) -> None:
    """Reports are signed with a key generated under this test's own VAR_DIR."""
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""


ANA_SAYS = (
    "My sister Lucinda moved to Porto last spring and I visit her every second weekend by train",
    "Please remember that my allergy to hazelnuts is severe, the clinic in Braga confirmed it",
    "Write to me at ana.pereira@example.org when the booking for the Douro cruise is confirmed",
)
BOB_SAYS = "Bob here: the quarterly report for the warehouse in Leeds is due on Friday"
EMAIL = "ana.pereira@example.org"
REASON = "Ana Pereira asked by letter of 3 November to be forgotten"


def _world() -> dict[str, Any]:
    """Ana (u-ana) in two agents' memory, Bob (u-bob) beside her in one of them."""
    alice: Agent = AgentFactory(slug="alice")
    bob_agent: Agent = AgentFactory(slug="bob")
    threads = []
    for agent, name in ((alice, "t-ana-1"), (alice, "t-ana-2"), (bob_agent, "t-ana-b")):
        thread = ThreadFactory(agent=agent, external_id=name, user_id="u-ana")
        for text in ANA_SAYS:
            EntryFactory(thread=thread, role="user", content=text)
            EntryFactory(thread=thread, role="assistant", content=f"Noted ({name}).")
        threads.append(thread)
    quoted = Entry.objects.filter(thread=threads[0], role="user").order_by("seq").first()
    assert quoted is not None
    MemoryItemFactory(
        agent=alice,
        subject="Ana",
        attribute="allergy",
        value="severe hazelnut allergy",
        user_id="u-ana",
        evidence=[{"entry_id": quoted.id, "quote": "my sister Lucinda moved to Porto"}],
    )
    MemoryFileVersionFactory(agent=alice, user_id="u-ana", path="/memories/ana.md", content="Ana: hazelnuts!\n")
    bob_thread = ThreadFactory(agent=alice, external_id="t-bob", user_id="u-bob")
    EntryFactory(thread=bob_thread, role="user", content=BOB_SAYS)
    bob_item = MemoryItemFactory(agent=alice, subject="Bob", attribute="report", value="due Friday", user_id="u-bob")
    return {"alice": alice, "bob_agent": bob_agent, "threads": threads, "bob_thread": bob_thread, "bob_item": bob_item}


def _file(django_capture_on_commit_callbacks: Any, **fields: Any) -> ErasureRequest:
    fields.setdefault("user_id", "u-ana")
    fields.setdefault("actor", "staff:pat")
    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(**fields)
    request.refresh_from_db()
    return request


def _erasure_audit() -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(action__startswith="erasure.").order_by("seq"))


def test_an_erasure_request_erases_the_person_and_its_report_finds_nothing(django_capture_on_commit_callbacks) -> None:
    world = _world()
    request = _file(
        django_capture_on_commit_callbacks,
        identifiers=[EMAIL],
        legal_basis="GDPR Art. 17(1)(a)",
        reason=REASON,
    )

    assert request.status == ErasureRequest.Status.DONE, request.error
    assert not Thread.objects.filter(user_id="u-ana").exists()
    assert not MemoryItem.objects.filter(user_id="u-ana").exists()
    assert not MemoryFileVersion.objects.filter(user_id="u-ana").exists()
    # Bob's memory, in the same agent, is untouched.
    assert Entry.objects.filter(thread=world["bob_thread"]).count() == 1
    assert MemoryItem.objects.filter(pk=world["bob_item"].pk).exists()

    report = request.report
    assert report is not None and report["outcome"] == "clean"
    assert report["scan"]["found"] == 0 and report["scan"]["findings"] == []
    assert report["erased_total"] > 0 and not report["nothing_to_erase"]
    assert report["probes"]["ids"] == ["user id", "identifier 1", "thread id 1", "thread id 2", "thread id 3"]
    assert report["probes"]["samples"] >= 3  # cut from her messages before they went
    scanned = {t["table"] for t in report["scan"]["tables"]}
    assert {"memoryapp_entry", "memoryapp_memoryitem", "memoryapp_evidence", "memoryapp_entity"} <= scanned
    assert {"memoryapp_memoryfileversion", "governance_jobrun", "memoryapp_webhookdelivery"} <= scanned
    assert {"memoryapp_thread", "memoryapp_event", "memoryapp_itemreview"} <= scanned
    # The report holds no erased content: none of her words, nor the typed reason.
    text = canonical_json(report)
    for said in ANA_SAYS:
        assert said[10:40] not in text
    assert REASON not in text and EMAIL not in text
    assert request.report_sha256 == report_sha256(report)
    assert request.progress_total and request.progress_done == request.progress_total
    # Signed: the receipt verifies with the service's key, and names the report's hash.
    assert receipt_verify(request.receipt)
    assert request.receipt["document"]["report_sha256"] == request.report_sha256
    assert request.receipt["document"]["report"] == report
    tampered = json.loads(json.dumps(request.receipt))
    tampered["document"]["report"]["scan"]["found"] = 0 if report["scan"]["found"] else 1
    assert not receipt_verify(tampered)

    # The audit chain: filed, done (with the report's hash), ids and counts only, and it verifies.
    filed, done = _erasure_audit()
    assert (filed.action, done.action) == ("erasure.request", "erasure.done")
    assert filed.subject == done.subject == str(request.pk)
    assert done.outcome == "clean" and done.details["report_sha256"] == request.report_sha256
    assert done.details["found"] == 0 and done.details["counts"]
    for record in (filed, done):
        written = canonical_json(record.details) + record.subject + record.actor
        assert "u-ana" not in written and EMAIL not in written and "Art. 17" not in written and "Lucinda" not in written
    assert audit_verify().ok

    # The change event, per agent that held something about her, names the request only.
    events = Event.objects.filter(type="erasure.done").order_by("agent_id")
    assert [(e.agent_id, e.ids) for e in events] == sorted(
        [(world["alice"].pk, [str(request.pk)]), (world["bob_agent"].pk, [str(request.pk)])]
    )
    run = JobRun.objects.get(pk=request.job_run_id)
    assert run.status == "succeeded" and run.arguments == {"request_id": request.pk}
    assert run.result["report_sha256"] == request.report_sha256


def test_the_report_finds_rows_left_on_purpose_naming_table_row_and_probe(django_capture_on_commit_callbacks) -> None:
    world = _world()
    # Leftovers person_erase has no reason to touch: Bob's thread quotes Ana's words, and a job
    # run's error names her e-mail address. Written with raw SQL, as a stray copy would be.
    quoted = ANA_SAYS[1]
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO memoryapp_entry (id, agent_id, thread_id, parent_id, seq, type, role, content, text,"
            " tool_call_id, tool_name, sender_name, token_count, metadata, created_at, content_hash)"
            " VALUES ('ent_planted', %s, %s, NULL, 99, 'message', 'assistant', %s, %s, '', '', '', 10, '{}',"
            " now(), 'x')",
            [world["alice"].pk, world["bob_thread"].pk, json.dumps(f"Ana wrote: {quoted}"), f"Ana wrote: {quoted}"],
        )
        cursor.execute(
            "INSERT INTO governance_jobrun (kind, arguments, dedupe_key, task_name, message_id, status,"
            " progress_done, result, error, attempts, usage, created_at, resends)"
            " VALUES ('mail', '{}', '', '', '', 'failed', 0, '{}', %s, 1, '{}', now(), 0) RETURNING id",
            [f"could not send to {EMAIL.upper()}"],
        )
        planted_run = cursor.fetchone()[0]

    request = _file(django_capture_on_commit_callbacks, identifiers=[EMAIL])

    report = request.report
    assert request.status == "done" and report["outcome"] == "leftovers"
    found = {(f["table"], f["row"]): f["probes"] for f in report["scan"]["findings"]}
    assert any(p.startswith("sample") for p in found[("memoryapp_entry", "ent_planted")])
    assert found[("governance_jobrun", str(planted_run))] == ["identifier 1"]
    assert report["scan"]["found"] == len(found) == 2
    by_table = {t["table"]: t["found"] for t in report["scan"]["tables"]}
    assert by_table["memoryapp_entry"] == 1 and by_table["governance_jobrun"] == 1
    assert quoted[5:35] not in canonical_json(report) and EMAIL not in canonical_json(report)
    done = _erasure_audit()[-1]
    assert done.outcome == "leftovers" and done.details["found"] == 2
    assert audit_verify().ok


def test_a_second_erasure_of_the_same_person_finds_nothing_and_says_so(django_capture_on_commit_callbacks) -> None:
    _world()
    first = _file(django_capture_on_commit_callbacks)
    second = _file(django_capture_on_commit_callbacks)
    assert first.report["erased_total"] > 0
    assert second.status == "done" and second.report["erased_total"] == 0
    assert second.report["nothing_to_erase"] and second.report["outcome"] == "clean"
    assert second.report["probes"]["samples"] == 0
    assert second.report["summary"].startswith("Nothing about this person was found")
    assert second.report_sha256 != first.report_sha256
    assert audit_verify().ok


def test_a_redaction_keeps_the_threads_and_its_report_counts_them_as_kept(django_capture_on_commit_callbacks) -> None:
    _world()
    request = _file(django_capture_on_commit_callbacks, mode="redact", identifiers=[EMAIL])
    report = request.report
    assert request.status == "done", request.error
    # The threads stay, their words are gone: no sample and no identifier is found anywhere.
    assert Thread.objects.filter(user_id="u-ana").count() == 3
    assert report["outcome"] == "clean" and report["scan"]["found"] == 0, report["scan"]["findings"]
    assert report["counts"]["entries_redacted"] > 0
    kept = {(f["table"], f["row"]) for f in report["scan"]["kept"]}
    assert {("memoryapp_thread", str(t.pk)) for t in Thread.objects.filter(user_id="u-ana")} <= kept
    assert report["scan"]["kept_total"] == len(kept)
    assert "kept on purpose still name the person" in report["summary"]
    for entry in Entry.objects.filter(thread__user_id="u-ana", type="message"):
        assert "Lucinda" not in entry.text and "hazelnut" not in entry.text


def test_the_agent_filter_leaves_other_agents_memory_of_the_person(django_capture_on_commit_callbacks) -> None:
    world = _world()
    request = _file(django_capture_on_commit_callbacks, agent_ids=[world["bob_agent"].pk])
    assert request.status == "done" and request.report["outcome"] == "clean"
    assert not Thread.objects.filter(agent=world["bob_agent"], user_id="u-ana").exists()
    assert Thread.objects.filter(agent=world["alice"], user_id="u-ana").count() == 2
    # The scan looked at bob's rows only: alice's rows about Ana are not leftovers of this request.
    assert request.report["agents"] == [world["bob_agent"].pk]
    assert list(Event.objects.filter(type="erasure.done").values_list("agent_id", flat=True)) == [world["bob_agent"].pk]


def test_a_legal_hold_stops_the_request_before_anything_changes(django_capture_on_commit_callbacks) -> None:
    world = _world()
    entries = Entry.objects.count()
    hold = LegalHold.objects.create(user_id="u-ana", reason="litigation 2026-17", placed_by="pat")
    thread_hold = LegalHold.objects.create(
        agent=world["bob_agent"], thread_external_id="t-ana-b", reason="subpoena", placed_by="pat"
    )

    request = _file(django_capture_on_commit_callbacks)

    assert request.status == ErasureRequest.Status.BLOCKED
    assert request.blocked_by == [hold.pk, thread_hold.pk]
    assert f"#{hold.pk}" in request.error and f"#{thread_hold.pk}" in request.error
    assert Entry.objects.count() == entries and Thread.objects.filter(user_id="u-ana").count() == 3
    assert request.report is None
    blocked = _erasure_audit()[-1]
    assert blocked.action == "erasure.blocked" and blocked.details == {
        "request": request.pk,
        "holds": request.blocked_by,
    }

    # Lifted, the request runs again and finishes.
    LegalHold.objects.filter(pk__in=[hold.pk, thread_hold.pk]).update(lifted_at=timezone.now(), lifted_by="pat")
    with django_capture_on_commit_callbacks(execute=True):
        erasure_request_retry(request=request, actor="staff:pat")
    request.refresh_from_db()
    assert request.status == "done" and request.blocked_by == [] and request.report["outcome"] == "clean"
    assert not Thread.objects.filter(user_id="u-ana").exists()
    assert [r.action for r in _erasure_audit()] == [
        "erasure.request",
        "erasure.blocked",
        "erasure.retry",
        "erasure.done",
    ]
    assert audit_verify().ok


def test_a_request_that_failed_part_way_runs_again_and_finishes(
    django_capture_on_commit_callbacks, monkeypatch
) -> None:
    """The cascade breaks after its first batch (a fault injected through its progress hook, as a
    lost connection would break it); the request fails; run again, it erases what is left."""
    world = _world()
    real_erase = erasure.person_erase

    def breaks_after_one_batch(**arguments: Any) -> dict[str, int]:
        def progress(done: int, total: int) -> None:
            if done > 0:
                raise ConnectionError("the database went away")

        return real_erase(**{**arguments, "progress": progress, "batch_size": 1})

    monkeypatch.setattr(erasure, "person_erase", breaks_after_one_batch)
    before_entries = Entry.objects.filter(thread__user_id="u-ana").count()
    before_items = MemoryItem.objects.filter(user_id="u-ana").count()
    request = _file(django_capture_on_commit_callbacks)
    assert request.status == "failed" and "ConnectionError" in request.error
    assert JobRun.objects.get(pk=request.job_run_id).status == "failed"
    # Part of the work was done, and stays done; the rest is still there.
    assert Entry.objects.filter(thread__user_id="u-ana").count() + MemoryItem.objects.filter(user_id="u-ana").count()
    assert Entry.objects.filter(thread__user_id="u-ana").count() < before_entries or (
        MemoryItem.objects.filter(user_id="u-ana").count() < before_items
    )
    failed = _erasure_audit()[-1]
    assert failed.action == "erasure.failed" and failed.details == {"request": request.pk, "error": "ConnectionError"}

    monkeypatch.setattr(erasure, "person_erase", real_erase)
    with django_capture_on_commit_callbacks(execute=True):
        erasure_request_retry(request=request, actor="staff:pat")
    request.refresh_from_db()
    assert request.status == "done" and request.report["outcome"] == "clean"
    assert not Thread.objects.filter(user_id="u-ana").exists()
    assert Entry.objects.filter(thread=world["bob_thread"]).count() == 1
    # Retried again when done: refused, nothing changes.
    with pytest.raises(DomainError):
        erasure_request_retry(request=request, actor="staff:pat")
    assert audit_verify().ok


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"user_id": "  "}, "user_id"),
        ({"user_id": "u\x00"}, "user_id"),
        ({"user_id": "u" * 129}, "user_id"),
        ({"mode": "shred"}, "mode"),
        ({"identifiers": ["ab"]}, "identifiers"),
        ({"agent_ids": [987654]}, "agent_ids"),
        ({"reason": "x" * 5000}, "reason"),
    ],
)
def test_bad_input_names_the_field_and_files_nothing(fields: dict[str, Any], field: str) -> None:
    AgentFactory(slug="alice")
    records = AuditRecord.objects.count()
    with pytest.raises(DomainError) as raised:
        erasure_request_file(**{"user_id": "u-ana", **fields})
    assert raised.value.field == field
    assert not ErasureRequest.objects.exists() and AuditRecord.objects.count() == records
    assert not JobRun.objects.filter(kind="erasure").exists()


def test_samples_are_distinctive_pieces_and_never_stored() -> None:
    assert sample_of("ok") is None
    assert sample_of('He said "I moved to Porto last spring with my sister" yesterday') == (
        "I moved to Porto last spring with my sister"
    )
    long = "word " * 10 + "Lucinda lives in a yellow house near the river Douro in Porto " + "word " * 10
    piece = sample_of(long)
    assert piece is not None and 12 <= len(piece) <= 48 and piece in long
    agent = AgentFactory(slug="alice")
    thread = ThreadFactory(agent=agent, external_id="t", user_id="u-ana")
    for text in ANA_SAYS:
        EntryFactory(thread=thread, role="user", content=text)
    request = ErasureRequest(user_id="u-ana", identifiers=[EMAIL], agent_ids=[])
    probes = probes_take(request=request)
    assert [p.name for p in probes][:2] == ["user id", "identifier 1"]
    samples = [p for p in probes if p.name.startswith("sample")]
    assert sorted(p.name for p in probes[2:]) == ["sample 1", "sample 2", "sample 3", "thread id 1"]
    assert all(any(p.needle in said for said in ANA_SAYS) for p in samples)


def test_an_id_probe_matches_whole_ids_only() -> None:
    agent = AgentFactory(slug="alice")
    ThreadFactory(agent=agent, external_id="t-10", user_id="u-10")
    ThreadFactory(agent=agent, external_id="t-1", user_id="u-1")
    ThreadFactory(agent=agent, external_id="t-1x", user_id="u-1-x")
    EntryFactory(thread=ThreadFactory(agent=agent, external_id="t-2", user_id=""), content="ask u-1.")
    request = ErasureRequest(user_id="u-1", identifiers=[], agent_ids=[])
    scan = leftovers_scan(probes=probes_take(request=request), agent_ids=[])
    rows = [f["row"] for f in scan["findings"] if f["table"] == "memoryapp_thread"]
    assert rows == [str(Thread.objects.get(user_id="u-1").pk)]
    entries = [f["row"] for f in scan["findings"] if f["table"] == "memoryapp_entry"]
    assert entries == [Entry.objects.get(thread__external_id="t-2").pk]  # "ask u-1." names u-1


def test_a_probe_with_like_wildcards_is_found_as_written() -> None:
    agent = AgentFactory(slug="alice")
    thread = ThreadFactory(agent=agent, external_id="t", user_id="")
    literal = EntryFactory(thread=thread, content="her handle is x_y%z here")
    EntryFactory(thread=thread, content="her handle is xAyBBz here")
    request = ErasureRequest(user_id="nobody-at-all", identifiers=["x_y%z"], agent_ids=[])
    scan = leftovers_scan(probes=probes_take(request=request), agent_ids=[])
    assert [(f["table"], f["row"], f["probes"]) for f in scan["findings"]] == [
        ("memoryapp_entry", literal.pk, ["identifier 1"])
    ]


def test_every_table_holding_text_is_scanned_or_said_why_not() -> None:
    scanned = {t.label for t in tables_to_scan()}
    for model in apps.get_app_config("memoryapp").get_models():
        meta = model._meta
        if meta.proxy:
            continue
        has_text = any(f.get_internal_type() in ("CharField", "TextField", "JSONField") for f in meta.concrete_fields)
        if has_text:
            assert meta.label_lower in scanned or meta.label_lower in NOT_SCANNED, meta.label_lower
