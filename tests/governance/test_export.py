"""Export of a person (a data subject access request): the archive holds exactly what memory holds
about the person in the agents chosen, its manifest's hashes match its parts, its threads import
back as they were, the job streams (bounded memory) and runs again safely."""

from __future__ import annotations

import hashlib
import io
import json
import tracemalloc
import zipfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from governance.audit.chain import audit_append, audit_verify
from governance.erasure.services import erasure_request_file
from governance.export import services as export
from governance.export.services import PersonScope, export_request_create, export_request_retry, export_run
from governance.models import AuditRecord, ExportRequest, JobRun
from governance.receipts import receipt_verify
from memoryapp.errors import DomainError
from memoryapp.files.access import FileAccess
from memoryapp.files.services import file_put
from memoryapp.items.facts import fact_remember
from memoryapp.items.services import (
    STALE_BY_DEDUPE,
    StaleMark,
    item_approve,
    item_forget,
    item_stale_undo,
    item_write,
    items_mark_stale,
)
from memoryapp.models import AccessLog, Agent, Entry, MemoryItem, Thread
from memoryapp.search.access_log import access_log_record
from memoryapp.threads.transfer import thread_import_lines
from tests.kit.api import Caller
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.factories import EntryFactory, ThreadFactory

pytestmark = pytest.mark.django_db

# Strings planted in the other people's data: none may appear anywhere in ana's archive.
BEN_WORDS = (
    "BEN-THREAD-WORDS",
    "BEN-ITEM-VALUE",
    "BEN-FACT-VALUE",
    "BEN-FILE-TEXT",
    "BEN-QUOTE",
    "BEN-REPLY-WORDS",
    "BEN-ELSEWHERE",
    "BEN-JOB",
    "CARL-WORDS",
    "u-ben",
    "u-carl",
    "u-anabel",
)


@pytest.fixture(autouse=True)
def export_dir(tmp_path: Path, settings: Any) -> Path:
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.VAR_DIR = tmp_path / "var"  # the receipt key is generated there
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    return Path(settings.EXPORT_DIR)


@dataclass
class Planted:
    alice: Agent
    bob: Agent
    ana_threads: list[Thread]
    ana_entries: list[Entry]
    ana_items: list[MemoryItem]
    ben_items: list[MemoryItem]
    bob_ana_item: MemoryItem
    ana_fact_id: str
    ana_versions: list[str]
    ben_versions: list[str]
    ana_elsewhere: list[Entry]
    others_entry_ids: list[str]
    ana_jobs: list[JobRun]
    access: dict[str, int]


def _put(agent: Agent, path: str, text: str, **scope: str) -> str:
    return file_put(access=FileAccess(agent=agent, reserved=(), **scope), path=path, text=text).pk


@pytest.fixture
def planted(alice: Caller, bob: Caller) -> Planted:
    """ana (u-ana) and ben (u-ben) with threads, items, facts and files in alice; ana in bob too."""
    a, b = alice.agent, bob.agent
    rome = ThreadFactory(
        agent=a, external_id="ana-rome", user_id="u-ana", turns=[("user", "ANA likes Rome"), ("assistant", "Noted")]
    )
    q = Entry.objects.get(thread=rome, seq=1)
    EntryFactory(thread=rome, role="user", content="ANA branch turn", parent_id=q.id, activate=False)
    diet = ThreadFactory(agent=a, external_id="ana-diet", user_id="u-ana", turns=[("user", "ANA eats no shellfish")])
    ben = ThreadFactory(
        agent=a, external_id="ben-chat", user_id="u-ben", turns=[("user", "BEN-THREAD-WORDS and BEN-QUOTE here")]
    )
    bob_thread = ThreadFactory(agent=b, external_id="ana-at-bob", user_id="u-ana", turns=[("user", "ANA at bob")])
    ben_entry = Entry.objects.get(thread=ben, seq=1)
    diet_entry = Entry.objects.get(thread=diet, seq=1)

    scoped = item_write(
        agent=a, kind="fact", subject="Ana", attribute="city", value="Rome", trust="system", user_id="u-ana"
    )
    quoted = item_write(  # agent-wide, but quoting ana's turn: about her
        agent=a,
        kind="preference",
        subject="Guest",
        attribute="diet",
        value="no shellfish",
        trust="user",
        evidence=[{"entry_id": diet_entry.id, "quote": "no shellfish"}],
    )
    thread_scoped = item_write(
        agent=a, kind="event", subject="Trip", attribute="plan", value="Rome day", trust="system", thread_id="ana-rome"
    )
    item_forget(item=thread_scoped, actor="staff:someone")  # a history step
    ben_item = item_write(
        agent=a, kind="fact", subject="Ben", attribute="city", value="BEN-ITEM-VALUE", trust="system", user_id="u-ben"
    )
    ben_quoted = item_write(
        agent=a,
        kind="fact",
        subject="Guest",
        attribute="pet",
        value="a cat",
        trust="user",
        evidence=[{"entry_id": ben_entry.id, "quote": "BEN-QUOTE"}],
    )
    bob_item = item_write(
        agent=b,
        kind="fact",
        subject="Ana",
        attribute="bob-note",
        value="ANA seen by bob",
        trust="system",
        user_id="u-ana",
    )
    fact_remember(agent=a, namespace="users/u-ana", key="tz", value={"zone": "Europe/Rome"})
    fact_remember(agent=a, namespace="users/u-ben", key="tz", value="BEN-FACT-VALUE")
    ana_fact = MemoryItem.objects.get(agent=a, namespace="users/u-ana", attribute="core:tz")

    ana_versions = [
        _put(a, "/memories/ana.md", "ANA notes v1\n", user_id="u-ana"),
        _put(a, "/memories/ana.md", "ANA notes v2\n", user_id="u-ana"),
        _put(a, "/memories/trip.md", "ANA trip file\n", thread_id="ana-rome"),
    ]
    ben_versions = [_put(a, "/memories/ben.md", "BEN-FILE-TEXT\n", user_id="u-ben")]

    # ana's words in threads of others, in both agents, among the others' own words.
    ana_at_ben = EntryFactory(thread=ben, role="user", content="ANA-ELSEWHERE joins ben", metadata={"userId": "u-ana"})
    EntryFactory(thread=ben, role="assistant", content="BEN-REPLY-WORDS to both")
    carl = ThreadFactory(agent=b, external_id="carl-at-bob", user_id="u-carl", turns=[("user", "CARL-WORDS first")])
    ana_at_carl = EntryFactory(thread=carl, role="user", content="ANA-ELSEWHERE at bob", metadata={"userId": "u-ana"})
    EntryFactory(thread=carl, role="user", content="BEN-ELSEWHERE at carl's", metadata={"userId": "u-ben"})
    others_entry_ids = list(
        Entry.objects.filter(thread__in=[ben, carl])
        .exclude(pk__in=[ana_at_ben.pk, ana_at_carl.pk])
        .values_list("pk", flat=True)
    )

    # Job runs naming ana (arguments, result; of an agent or of none), and runs naming others.
    ana_jobs = [
        JobRun.objects.create(kind="extract", agent_id=a.pk, arguments={"user_id": "u-ana", "thread_id": "ana-rome"}),
        JobRun.objects.create(kind="brief", agent_id=b.pk, arguments={"n": 1}, result={"people": ["u-ana"]}),
        JobRun.objects.create(kind="erase", agent_id=None, arguments={"user_id": "u-ana"}, result={"threads": 3}),
    ]
    JobRun.objects.create(kind="extract", agent_id=a.pk, arguments={"user_id": "u-ben", "note": "BEN-JOB"})
    JobRun.objects.create(kind="extract", agent_id=b.pk, arguments={"user_id": "u-anabel"})

    # What the agents were sent: about ana (her thread, a search for her), ana's memory in requests
    # of others (with theirs), and requests of others that sent nothing of hers.
    rome_entries = list(Entry.objects.filter(thread=rome).values_list("pk", flat=True))
    ben_ids = [e for e in others_entry_ids if Entry.objects.filter(pk=e, thread=ben).exists()]
    log = {
        "rome": (a, rome, "", [scoped.pk, ben_quoted.pk], rome_entries),
        "ben-search": (a, None, "u-ben", [quoted.pk, ben_item.pk], []),
        "ben-context": (a, ben, "", [ben_item.pk], [*ben_ids, ana_at_ben.pk]),
        "ben-only": (a, ben, "", [ben_item.pk, ben_quoted.pk], ben_ids),
        "bob-search": (b, None, "u-ana", [bob_item.pk], []),
        "carl-context": (b, carl, "", [], [ana_at_carl.pk, *others_entry_ids[-2:]]),
    }
    for agent, thread, user_id, item_ids, entry_ids in log.values():
        access_log_record(
            agent_id=agent.pk,
            thread=thread,
            user_id=user_id,
            source="context" if thread else "search",
            item_ids=item_ids,
            entry_ids=entry_ids,
        )
    access = {
        name: pk for name, pk in zip(log, AccessLog.objects.order_by("pk").values_list("pk", flat=True), strict=True)
    }
    return Planted(
        alice=a,
        bob=b,
        ana_threads=[rome, diet, bob_thread],
        ana_entries=list(Entry.objects.filter(thread__in=[rome, diet, bob_thread])),
        ana_items=[scoped, quoted, thread_scoped],
        ben_items=[ben_item, ben_quoted],
        bob_ana_item=bob_item,
        ana_fact_id=ana_fact.pk,
        ana_versions=ana_versions,
        ben_versions=ben_versions,
        ana_elsewhere=[ana_at_ben, ana_at_carl],
        others_entry_ids=others_entry_ids,
        ana_jobs=ana_jobs,
        access=access,
    )


def _exported(request: ExportRequest) -> tuple[dict[str, bytes], dict[str, Any]]:
    request.refresh_from_db()
    assert request.status == ExportRequest.Status.DONE, request.error
    path = export.export_archive_path(request)
    assert path is not None
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    return files, json.loads(files["manifest.json"])


def _records(files: dict[str, bytes], name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in files[name].decode().splitlines() if line]


def _run(user_id: str, agent_ids: list[int] | None = None) -> ExportRequest:
    request = export_request_create(user_id=user_id, agent_ids=agent_ids or [], actor="staff:officer")
    export_run(request_id=request.pk)
    request.refresh_from_db()
    return request


def test_the_archive_holds_exactly_the_persons_data_across_agents(planted: Planted) -> None:
    files, manifest = _exported(_run("u-ana"))

    slug_a, slug_b = planted.alice.slug, planted.bob.slug
    assert {n for n in files if n.startswith("threads/")} == {
        f"threads/{slug_a}/ana-rome.jsonl",
        f"threads/{slug_a}/ana-diet.jsonl",
        f"threads/{slug_b}/ana-at-bob.jsonl",
    }
    nodes = [r["node"] for n in files if n.startswith("threads/") for r in _records(files, n) if r["type"] == "node"]
    assert sorted(node["id"] for node in nodes) == sorted(e.id for e in planted.ana_entries)

    items = {r["item"]["id"]: r["item"] for r in _records(files, "items.jsonl")}
    assert set(items) == {i.pk for i in planted.ana_items} | {planted.bob_ana_item.pk}
    quoted = items[planted.ana_items[1].pk]
    assert [e["quote"] for e in quoted["evidence"]] == ["no shellfish"]
    assert [step["action"] for step in items[planted.ana_items[2].pk]["history"]] == ["forgotten"]
    assert "actor" not in items[planted.ana_items[2].pk]["history"][0]
    facts = [r["fact"] for r in _records(files, "facts.jsonl")]
    assert [(f["id"], f["value_json"]) for f in facts] == [(planted.ana_fact_id, {"zone": "Europe/Rome"})]

    versions = {r["file_version"]["id"]: r["file_version"] for r in _records(files, "files.jsonl")}
    assert set(versions) == set(planted.ana_versions)
    assert versions[planted.ana_versions[1]]["content"] == "ANA notes v2\n"

    entity_names = {r["entity"]["name"] for r in _records(files, "entities.jsonl")}
    assert "Ana" in entity_names and "Ben" not in entity_names

    audit = [r["audit"] for r in _records(files, "audit.jsonl")]
    named = {a["subject"] for a in audit} | {a["thread_id"] for a in audit}
    assert {i.pk for i in planted.ana_items} <= named
    assert "ben-chat" not in named and not ({i.pk for i in planted.ben_items} & named)
    assert not set(planted.ben_versions) & named

    # Her messages in threads of others: placed (agent, thread, seq, role, time), alone.
    messages = {r["message"]["entry_id"]: r["message"] for r in _records(files, "messages.jsonl")}
    assert set(messages) == {e.pk for e in planted.ana_elsewhere}
    at_ben = messages[planted.ana_elsewhere[0].pk]
    assert at_ben["content"] == "ANA-ELSEWHERE joins ben" and at_ben["role"] == "user"
    assert (at_ben["agent_id"], at_ben["thread_id"], at_ben["seq"]) == (planted.alice.pk, "ben-chat", 2)
    assert at_ben["created_at"] == planted.ana_elsewhere[0].created_at.isoformat()
    assert messages[planted.ana_elsewhere[1].pk]["thread_id"] == "carl-at-bob"

    jobs = {r["job_run"]["id"]: r["job_run"] for r in _records(files, "job_runs.jsonl")}
    assert set(jobs) == {run.pk for run in planted.ana_jobs}
    assert jobs[planted.ana_jobs[1].pk]["result"] == {"people": ["u-ana"]}

    # The access log: rows about her whole, rows of others with her ids only.
    access = {r["access"]["id"]: r["access"] for r in _records(files, "access_log.jsonl")}
    named = planted.access
    assert set(access) == {named[k] for k in ("rome", "ben-search", "ben-context", "bob-search", "carl-context")}
    rome = access[named["rome"]]
    assert rome["about_them"] and rome["thread_id"] == "ana-rome" and rome["source"] == "context"
    assert rome["item_ids"] == [planted.ana_items[0].pk]  # ben's item sent with it is left out
    assert sorted(rome["entry_ids"]) == sorted(
        e.id for e in planted.ana_entries if e.thread_id == planted.ana_threads[0].pk
    )
    assert access[named["ben-search"]] == {
        **access[named["ben-search"]],
        "about_them": False,
        "thread_id": None,
        "item_ids": [planted.ana_items[1].pk],
        "entry_ids": [],
    }
    ben_context = access[named["ben-context"]]
    assert (ben_context["thread_id"], ben_context["item_ids"]) == ("ben-chat", [])
    assert ben_context["entry_ids"] == [planted.ana_elsewhere[0].pk]
    assert access[named["bob-search"]]["about_them"] and access[named["bob-search"]]["item_ids"] == [
        planted.bob_ana_item.pk
    ]
    assert access[named["carl-context"]]["entry_ids"] == [planted.ana_elsewhere[1].pk]

    everything = b"".join(files.values())
    for word in BEN_WORDS:
        assert word.encode() not in everything, word
    for other_id in [*planted.others_entry_ids, *(i.pk for i in planted.ben_items)]:
        assert other_id.encode() not in everything, other_id
    assert "vectors.jsonl" not in files and manifest["vectors"]["included"] is False
    assert manifest["counts"]["threads"] == 3
    assert manifest["counts"]["entries"] == len(planted.ana_entries)
    assert manifest["counts"]["items"] == 4 and manifest["counts"]["facts"] == 1
    assert manifest["counts"]["file_versions"] == 3
    assert manifest["counts"]["messages_elsewhere"] == 2 and manifest["counts"]["job_runs"] == 3
    assert manifest["counts"]["access_log"] == 5 and "vectors" not in manifest["counts"]


def test_the_agent_filter_leaves_the_other_agents_out(planted: Planted) -> None:
    files, manifest = _exported(_run("u-ana", [planted.alice.pk]))

    assert [r["message"]["thread_id"] for r in _records(files, "messages.jsonl")] == ["ben-chat"]
    # The runs of alice and of no agent; bob's is left out.
    assert {r["job_run"]["id"] for r in _records(files, "job_runs.jsonl")} == {
        planted.ana_jobs[0].pk,
        planted.ana_jobs[2].pk,
    }
    assert {r["access"]["agent_id"] for r in _records(files, "access_log.jsonl")} == {planted.alice.pk}
    assert manifest["counts"]["access_log"] == 3

    assert not [n for n in files if n.startswith(f"threads/{planted.bob.slug}/")]
    assert b"ANA seen by bob" not in b"".join(files.values())
    assert b"ANA at bob" not in b"".join(files.values())
    assert [a["slug"] for a in manifest["agents"]] == [planted.alice.slug]
    assert manifest["counts"]["threads"] == 2


def test_the_audit_records_naming_her_messages_elsewhere_are_exported_and_only_those(planted: Planted) -> None:
    ana_at_ben = planted.ana_elsewhere[0].pk
    theirs = audit_append(
        action="entry.redact",
        actor="staff:someone",
        agent_id=planted.alice.pk,
        thread_id="ben-chat",
        subject="2 entries",
        details={"entry_ids": [planted.others_entry_ids[0], ana_at_ben]},
    )
    audit_append(
        action="entry.redact",
        actor="staff:someone",
        agent_id=planted.alice.pk,
        thread_id="ben-chat",
        subject="1 entry",
        details={"entry_ids": [planted.others_entry_ids[0]]},
    )

    files, _ = _exported(_run("u-ana"))

    in_ben_chat = [r["audit"] for r in _records(files, "audit.jsonl") if r["audit"]["thread_id"] == "ben-chat"]
    assert [a["seq"] for a in in_ben_chat] == [theirs.seq]


def _vector(n: int, dimensions: int) -> list[float]:
    return [((n * 31 + k) % 97) / 97 - 0.5 for k in range(dimensions)]


def test_vectors_are_exported_only_when_asked_for_and_only_the_persons(planted: Planted, settings: Any) -> None:
    dimensions = settings.EMBEDDING_DIMENSIONS
    ana_entries = [planted.ana_entries[0], planted.ana_elsewhere[0], planted.ana_elsewhere[1]]
    ana_items = [planted.ana_items[0], planted.bob_ana_item]
    embedded: dict[str, list[float]] = {}
    for n, row in enumerate([*ana_entries, *ana_items]):
        type(row).objects.filter(pk=row.pk).update(embedding=_vector(n, dimensions))
        embedded[row.pk] = _vector(n, dimensions)
    Entry.objects.filter(pk__in=planted.others_entry_ids).update(embedding=_vector(99, dimensions))
    MemoryItem.objects.filter(pk__in=[i.pk for i in planted.ben_items]).update(embedding=_vector(98, dimensions))

    without, _ = _exported(_run("u-ana"))
    request = export_request_create(user_id="u-ana", include_vectors=True, actor="staff:officer")
    export_run(request_id=request.pk)
    files, manifest = _exported(request)

    assert "vectors.jsonl" not in without
    vectors = {r["id"]: r for r in _records(files, "vectors.jsonl")}
    assert set(vectors) == set(embedded)  # ben's, carl's and the unembedded rows are not there
    for pk, values in embedded.items():
        assert vectors[pk]["kind"] == ("entry" if pk in {e.pk for e in ana_entries} else "item")
        assert vectors[pk]["vector"] == pytest.approx(values, abs=1e-6)
    assert manifest["vectors"] == {
        "included": True,
        "model": settings.EMBEDDING_MODEL,
        "dimensions": dimensions,
    }
    assert manifest["counts"]["vectors"] == 5 == request.counts["vectors"]
    assert AuditRecord.objects.filter(action="export.request").last().details["vectors"] is True  # type: ignore[union-attr]


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_include_vectors_must_be_a_boolean(alice: Caller, value: Any) -> None:
    with pytest.raises(DomainError) as refused:
        export_request_create(user_id="u-ana", include_vectors=value, actor="staff:officer")
    assert refused.value.field == "include_vectors"
    assert not ExportRequest.objects.exists()


def test_the_manifest_hashes_match_the_parts_and_its_receipt_verifies(planted: Planted) -> None:
    request = _run("u-ana")
    files, manifest = _exported(request)

    listed = {part["path"]: part for part in manifest["parts"]}
    assert set(listed) == set(files) - {"manifest.json", "receipt.json"}
    for path, part in listed.items():
        assert hashlib.sha256(files[path]).hexdigest() == part["sha256"], path
        assert len(files[path]) == part["bytes"]
        assert len(files[path].decode().splitlines()) == part["records"]
    assert hashlib.sha256(files["manifest.json"]).hexdigest() == request.manifest_sha256
    receipt = json.loads(files["receipt.json"])
    assert receipt_verify(receipt)
    assert receipt["document"]["manifest_sha256"] == request.manifest_sha256
    assert manifest["format"] == "memory-person-export" and manifest["format_version"] == 1


def test_an_exported_thread_imports_back_with_the_same_entries_and_hashes(planted: Planted) -> None:
    files, _ = _exported(_run("u-ana"))
    original = planted.ana_threads[0]
    columns = ("id", "seq", "parent_id", "role", "text", "content_hash", "created_at")
    before = list(Entry.objects.filter(thread=original).order_by("seq").values_list(*columns))
    leaf = original.active_leaf_id
    original.delete()  # entry ids are global: the copy takes them back

    copy = thread_import_lines(
        agent=planted.alice, lines=io.StringIO(files[f"threads/{planted.alice.slug}/ana-rome.jsonl"].decode())
    )

    assert list(Entry.objects.filter(thread=copy).order_by("seq").values_list(*columns)) == before
    assert copy.user_id == "u-ana" and copy.active_leaf_id == leaf and copy.external_id == "ana-rome"


def test_audit_records_name_the_request_by_id_only_and_the_chain_verifies(planted: Planted) -> None:
    request = _run("u-ana")

    filed = AuditRecord.objects.get(action="export.request")
    done = AuditRecord.objects.get(action="export.done")
    for record in (filed, done):
        assert record.subject == f"export:{request.pk}"
        assert "u-ana" not in json.dumps(record.details) + record.subject + record.thread_id
        assert str(export.export_dir()) not in json.dumps(record.details)
    assert filed.actor == "staff:officer"
    assert done.details["threads"] == 3 and done.details["manifest_sha256"] == request.manifest_sha256
    assert audit_verify().ok


def test_filing_runs_the_job_after_commit_with_progress(
    planted: Planted, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        request = export_request_create(user_id="u-ana", agent_ids=[], actor="staff:officer")

    request.refresh_from_db()
    assert request.status == ExportRequest.Status.DONE
    run = JobRun.objects.get(pk=request.job_run_id)
    assert run.kind == "export" and run.status == JobRun.Status.SUCCEEDED
    assert run.arguments == {"request_id": request.pk}
    assert run.result["threads"] == 3
    # threads + items (with facts) + file versions + messages elsewhere: the bar ends full.
    assert request.progress_total == 3 + 5 + 3 + 2 and request.progress_done == request.progress_total
    assert "u-ana" not in json.dumps(run.result) + json.dumps(run.arguments)


@pytest.mark.parametrize(
    ("user_id", "agent_ids", "field"),
    [
        ("", [], "user_id"),
        ("  ", [], "user_id"),
        ("x" * 129, [], "user_id"),
        ("u\x00a", [], "user_id"),
        ("u-ana", [999999], "agent_ids"),
    ],
)
def test_a_bad_request_is_refused_naming_the_field_and_writes_nothing(
    alice: Caller, user_id: str, agent_ids: list[int], field: str
) -> None:
    with pytest.raises(DomainError) as refused:
        export_request_create(user_id=user_id, agent_ids=agent_ids, actor="staff:officer")
    assert refused.value.field == field
    assert not ExportRequest.objects.exists()
    assert not AuditRecord.objects.filter(action="export.request").exists()


def test_a_done_export_is_not_written_again_and_a_lost_archive_is(planted: Planted) -> None:
    request = _run("u-ana")
    path = export.export_archive_path(request)
    assert path is not None
    first = path.read_bytes()

    assert export_run(request_id=request.pk) is None  # done, its archive there: nothing to do
    assert path.read_bytes() == first
    path.unlink()
    again = export_run(request_id=request.pk)
    assert again is not None and again["threads"] == 3
    assert AuditRecord.objects.filter(action="export.done").count() == 2


def test_an_export_that_fails_part_way_leaves_no_partial_and_completes_when_run_again(
    planted: Planted, monkeypatch: pytest.MonkeyPatch, export_dir: Path
) -> None:
    request = export_request_create(user_id="u-ana", agent_ids=[], actor="staff:officer")

    def disk_full(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "_write_files", disk_full)  # after the threads and items were written
    with pytest.raises(OSError):
        export_run(request_id=request.pk)
    request.refresh_from_db()
    assert request.status == ExportRequest.Status.FAILED and "No space left" in request.error
    assert list(export_dir.iterdir()) == []  # no partial archive left behind
    monkeypatch.undo()

    export_request_retry(request=request, actor="staff:officer")
    export_run(request_id=request.pk)
    _, manifest = _exported(request)
    assert manifest["counts"]["file_versions"] == 3
    assert AuditRecord.objects.filter(action="export.retry").count() == 1
    with pytest.raises(export.ExportRetryRefused):
        export_request_retry(request=request, actor="staff:officer")


def test_the_persons_scope_reads_no_other_agents_rows(planted: Planted, mallory: Caller) -> None:
    nothing = PersonScope(user_id="u-ana", agent_ids=(mallory.agent.pk,))
    assert not nothing.threads().exists()
    assert not nothing.all_items().exists()
    assert not nothing.file_versions().exists()
    assert not nothing.audit_records().exists()
    assert not nothing.messages_elsewhere().exists()
    assert not nothing.access_log().exists()
    assert not nothing.job_runs().exclude(agent_id=None).exists()  # a run of no agent is every agent's


@pytest.mark.slow
def test_a_large_export_streams_in_memory_far_below_its_size(alice: Caller, export_dir: Path) -> None:
    """2,000 threads of 5 turns of 4 KB of random hex (which deflate shrinks by a third only), 2,000
    messages of as much in a thread of another person, and 4,000 rows of the access log: the export's
    peak of Python memory stays a small fraction of the archive. What it holds at most: a fetch of
    entries (ENTRY_FETCH), a part's buffer, and the zip's directory (a few hundred bytes a part,
    which a zip writes at its end)."""
    import secrets

    agent = alice.agent
    now = timezone.now()
    threads = Thread.objects.bulk_create(
        [Thread(agent=agent, external_id=f"big-{n}", user_id="u-big", next_seq=6) for n in range(2000)]
    )
    entries: list[Entry] = []
    for thread in threads:
        parent = None
        for seq in range(1, 6):
            text = secrets.token_hex(2048)
            entry = Entry(
                agent=agent,
                thread=thread,
                parent_id=parent,
                seq=seq,
                role="user" if seq % 2 else "assistant",
                content=text,
                text=text,
                created_at=now + timedelta(microseconds=seq),
                content_hash="0" * 32,
            )
            entries.append(entry)
            parent = entry.id
        if len(entries) >= 5000:
            Entry.objects.bulk_create(entries)
            entries = []
    Entry.objects.bulk_create(entries)
    other = Thread.objects.create(agent=agent, external_id="someone-else", user_id="u-other", next_seq=2001)
    elsewhere = [
        Entry(
            agent=agent,
            thread=other,
            seq=seq,
            role="user",
            content=secrets.token_hex(2048),
            metadata={"userId": "u-big"},
            sender="u-big",  # as entry_from_spec sets it from metadata.userId
            created_at=now,
            content_hash="0" * 32,
        )
        for seq in range(1, 2001)
    ]
    Entry.objects.bulk_create(elsewhere, batch_size=500)
    AccessLog.objects.bulk_create(
        [
            AccessLog(agent=agent, thread=thread, user_id="u-big", source="context", at=now, entry_ids=[])
            for thread in threads
        ]
        + [
            AccessLog(agent=agent, thread=other, user_id="u-other", source="context", at=now, entry_ids=[e.id])
            for e in elsewhere
        ]
    )
    request = export_request_create(user_id="u-big", agent_ids=[agent.pk], actor="staff:officer")

    tracemalloc.start()
    try:
        export_run(request_id=request.pk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    request.refresh_from_db()
    assert request.counts["threads"] == 2000 and request.counts["entries"] == 10000
    assert request.counts["messages_elsewhere"] == 2000 and request.counts["access_log"] == 4000
    size = request.archive_size or 0
    # 10,000 turns of 4 KB of hex: deflate keeps about 70% of it (4 bits of every 8 are random).
    assert size > 20_000_000
    print(f"export of 2,000 threads: peak {peak / 1e6:.1f} MB of Python memory, archive {size / 1e6:.1f} MB")
    assert peak < size / 8, f"peak {peak / 1e6:.1f} MB for an archive of {size / 1e6:.1f} MB"


def test_each_item_carries_exactly_its_own_quotes_and_review_steps(alice: Caller) -> None:
    thread = ThreadFactory(
        agent=alice.agent,
        external_id="many",
        user_id="u-ana",
        turns=[("user", f"ANA said thing number {n} today") for n in range(6)],
    )
    entries = list(Entry.objects.filter(thread=thread).order_by("seq"))
    written = {}
    for n in range(6):
        quotes = [entries[n], entries[(n + 1) % 6]] if n % 2 else [entries[n]]
        item = item_write(
            agent=alice.agent,
            kind="fact",
            subject="Ana",
            attribute=f"thing-{n}",
            value=f"thing {n}",
            trust="user",
            user_id="u-ana" if n < 3 else "",  # the others are hers by their quotes
            evidence=[{"entry_id": e.id, "quote": e.text[:20]} for e in quotes],
        )
        if n % 3 == 0:
            item_forget(item=item, actor="staff:someone")
        written[item.pk] = ([e.id for e in quotes], 1 if n % 3 == 0 else 0)

    files, _ = _exported(_run("u-ana"))

    items = {r["item"]["id"]: r["item"] for r in _records(files, "items.jsonl")}
    assert set(items) == set(written)
    for item_id, (quoted, steps) in written.items():
        assert sorted(e["entry_id"] for e in items[item_id]["evidence"]) == sorted(quoted), item_id
        assert len(items[item_id]["history"]) == steps, item_id


def test_the_archive_names_no_staff_member_in_items_audit_records_or_job_runs(alice: Caller) -> None:
    reviewed = item_write(
        agent=alice.agent, kind="fact", subject="Ana", attribute="pet", value="a cat", trust="model", user_id="u-ana"
    )
    item_approve(item=reviewed, actor="staff:eve-reviewer")
    undone = item_write(
        agent=alice.agent, kind="fact", subject="Ana", attribute="car", value="a van", trust="system", user_id="u-ana"
    )
    because = {"by": STALE_BY_DEDUPE, "reason": "duplicate", "kept": reviewed.pk}
    items_mark_stale(marks=[StaleMark(item_id=undone.pk, because=because)], actor="job:consolidation")
    item_stale_undo(item=undone, actor="staff:eve-reviewer")

    files, _ = _exported(_run("u-ana"))

    everything = b"".join(files.values()).decode()
    assert "eve-reviewer" not in everything and "staff:officer" not in everything
    items = {r["item"]["id"]: r["item"] for r in _records(files, "items.jsonl")}
    assert items[reviewed.pk]["metadata"]["reviewed_by"] == "staff"
    assert items[undone.pk]["metadata"]["stale_undone"]["by"] == "staff"
    actors = {r["audit"]["actor"] for r in _records(files, "audit.jsonl")}
    assert "staff" in actors and not any(a.startswith("staff:") for a in actors)


def test_erasing_the_person_takes_their_archives_and_a_late_run_writes_nothing(
    planted: Planted, export_dir: Path, django_capture_on_commit_callbacks: Any
) -> None:
    done = _run("u-ana")
    waiting = export_request_create(user_id="u-ana", agent_ids=[], actor="staff:officer")
    other = _run("u-ben")

    with django_capture_on_commit_callbacks(execute=True):
        counts = export.exports_forget_person(user_id="u-ana", actor="staff:officer")

    assert counts == {"requests": 2, "archives": 1}
    assert sorted(p.name for p in export_dir.iterdir()) == [f"export-{other.pk}.zip"]
    assert not ExportRequest.objects.filter(user_id="u-ana").exists()
    assert export.export_archive_path(ExportRequest.objects.get(pk=done.pk)) is None
    assert export_run(request_id=waiting.pk) is None  # its job, arriving late
    with pytest.raises(export.ExportRetryRefused, match="erased"):
        export_request_retry(request=waiting, actor="staff:officer")
    assert sorted(p.name for p in export_dir.iterdir()) == [f"export-{other.pk}.zip"]
    forgot = AuditRecord.objects.get(action="export.forget")
    assert "u-ana" not in json.dumps(forgot.details) + forgot.subject


def test_an_erasure_request_takes_the_persons_export_archives(
    planted: Planted, export_dir: Path, django_capture_on_commit_callbacks: Any, settings: Any, tmp_path: Path
) -> None:
    settings.VAR_DIR = tmp_path / "var"  # the report's signing key is generated here
    settings.RECEIPT_SIGNING_KEY, settings.RECEIPT_SIGNING_KEY_FILE = "", ""
    _run("u-ana")
    other = _run("u-ben")
    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id="u-ana", actor="staff:officer")
    request.refresh_from_db()

    assert request.status == "done" and request.counts["export_archives"] == 1
    assert sorted(p.name for p in export_dir.iterdir()) == [f"export-{other.pk}.zip"]
    assert not ExportRequest.objects.filter(user_id="u-ana").exists()


def test_with_encryption_on_her_messages_elsewhere_and_job_runs_are_exported_opened(
    encrypted: Any,  # noqa: F811  (the fixture imported above)
    db: None,
    planted: Planted,
) -> None:
    files, manifest = _exported(_run("u-ana"))

    messages = {r["message"]["entry_id"]: r["message"]["content"] for r in _records(files, "messages.jsonl")}
    assert messages == {
        planted.ana_elsewhere[0].pk: "ANA-ELSEWHERE joins ben",
        planted.ana_elsewhere[1].pk: "ANA-ELSEWHERE at bob",
    }
    # The runs naming her in their arguments (plain JSON), and the run naming her in its result
    # only: sealed, it is opened to be found (the erasure's selector, which scrubs it too).
    jobs = {r["job_run"]["id"]: r["job_run"] for r in _records(files, "job_runs.jsonl")}
    assert set(jobs) == {run.pk for run in planted.ana_jobs}
    assert jobs[planted.ana_jobs[1].pk]["result"] == {"people": ["u-ana"]}
    assert jobs[planted.ana_jobs[2].pk]["result"] == {"threads": 3}  # opened
    assert manifest["counts"]["messages_elsewhere"] == 2 and manifest["counts"]["access_log"] == 5
    for word in BEN_WORDS:
        assert word.encode() not in b"".join(files.values()), word
