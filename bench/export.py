"""Export of a person (governance.export) against a raw COPY of the same rows, in one run.

Uses the database of the Django settings (the embedded PostgreSQL under var/ unless DATABASE_URL is
set; run `manage.py migrate` first). Creates an agent of its own, `bench-export-<random>`, and
deletes its rows (and the archive) at the end; the audit records the export wrote stay.

1. The sample (not measured): one person with `--threads` threads (default 1,000) of
   `--turns` entries each (default 100: 100,000 entries of about 300 characters), `--items` items
   (default 20,000), each quoting one of their entries, a fact per 20 items, a memory file per 100
   items with three versions, a context build logged per thread (its last 20 entries, 5 items) and a
   job run per 10 threads naming them; and another person with a tenth of that, whom the export leaves
   out, except every tenth of their user turns, which the first person wrote (messages elsewhere).
   With `--vectors`, every entry and item has a vector and the request asks for them.
2. Baseline: `COPY (SELECT the person's rows) TO STDOUT` of the same entries, items, evidence, file
   versions, messages elsewhere, job runs and access-log rows (every column but vectors, unless asked
   for), written to a file: what reading those rows out costs at least.
3. The export: `export_run` of a request for the person (threads as JSONL, items with evidence and
   history, facts, entities, files, messages elsewhere, job runs, access log, audit records, vectors
   when asked for, manifest, signed receipt) into a zip.
4. Printed: rows and MB (uncompressed: the JSONL bytes of the archive's parts; the COPY's file) per
   second for each, the archive's size, the ratio export / baseline, and the peak RSS of the process
   that ran the export (a child of its own), beside a bare Django process's.

    python bench/export.py [--threads 1000] [--turns 100] [--items 20000] [--vectors]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ["EMBEDDER"] = "fake"
os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import QuerySet  # noqa: E402
from django.utils import timezone  # noqa: E402

from governance.export.services import PersonScope, export_archive_path  # noqa: E402
from governance.models import ExportRequest, JobRun  # noqa: E402
from memoryapp.models import (  # noqa: E402
    AccessLog,
    Agent,
    Entry,
    Evidence,
    MemoryFileVersion,
    MemoryItem,
    Thread,
)
from memoryapp.search.access_log import access_log_person_reading  # noqa: E402

WORDS = [
    "the",
    "trip",
    "to",
    "Porto",
    "starts",
    "on",
    "Friday",
    "with",
    "a",
    "train",
    "and",
    "a",
    "small",
    "hotel",
    "near",
    "the",
    "river",
    "where",
    "Ana",
    "booked",
    "a",
    "quiet",
    "room,",
    "she",
    "asked",
    "for",
    "vegetarian",
    "food,",
    "no",
    "flights",
    "under",
    "500",
    "km,",
    "and",
    "a",
    "budget",
    "of",
    "about",
    "900",
    "euros",
    "for",
    "the",
    "whole",
    "week",
    "including",
    "museums",
    "and",
    "a",
    "day",
    "by",
    "the",
    "sea",
]


def _text(n: int) -> str:
    words = [WORDS[(n * 7 + k * 13) % len(WORDS)] for k in range(48)]
    return " ".join(words) + f" #{n} {secrets.token_hex(8)}"


def _vector(vectors: bool) -> list[float] | None:
    if not vectors:
        return None
    return [secrets.randbelow(2001) / 1000 - 1 for _ in range(settings.EMBEDDING_DIMENSIONS)]


def seed(
    agent: Agent, *, user_id: str, threads: int, turns: int, items: int, guest: str = "", vectors: bool = False
) -> None:
    """Bulk rows for one person (as the services would write them, without their bookkeeping); every
    tenth of their user turns written by `guest` when given (the guest's messages elsewhere)."""
    now = timezone.now() - timedelta(days=1)
    made = Thread.objects.bulk_create(
        [
            Thread(agent=agent, external_id=f"{user_id}-{n}", user_id=user_id, next_seq=turns + 1)
            for n in range(threads)
        ],
        batch_size=1000,
    )
    entry_ids: list[str] = []
    batch: list[Entry] = []
    last_of_thread: dict[int, list[str]] = {}
    n = 0
    for thread in made:
        parent = None
        for seq in range(1, turns + 1):
            by_guest = bool(guest) and seq % 20 == 1
            text = _text(n)
            entry = Entry(
                agent=agent,
                thread=thread,
                parent_id=parent,
                seq=seq,
                role="user" if seq % 2 else "assistant",
                content=text,
                text=text,
                token_count=60,
                metadata={"userId": guest} if by_guest else {},
                created_at=now + timedelta(milliseconds=n),
                content_hash=f"{n:032x}",
                embedding=_vector(vectors),
            )
            batch.append(entry)
            parent = entry.id
            n += 1
        last_of_thread[thread.pk] = [e.id for e in batch[-20:]]
        Thread.objects.filter(pk=thread.pk).update(active_leaf_id=parent)
        if len(batch) >= 5000:
            Entry.objects.bulk_create(batch)
            entry_ids += [e.id for e in batch]
            batch = []
    Entry.objects.bulk_create(batch)
    entry_ids += [e.id for e in batch]
    rows: list[MemoryItem] = []
    for k in range(items):
        fact = k % 20 == 0
        rows.append(
            MemoryItem(
                agent=agent,
                user_id=user_id,
                kind="fact",
                subject=f"users/{user_id}" if fact else "Ana",
                attribute=f"core:key{k}" if fact else f"detail-{k}",
                namespace=f"users/{user_id}" if fact else "",
                value=_text(k)[:120],
                value_json={"v": k} if fact else None,
                trust="system" if fact else "user",
                status="active",
                verified=True,
                valid_from=now,
                recorded_at=now,
                activated_at=now,
                embedding=_vector(vectors),
            )
        )
    MemoryItem.objects.bulk_create(rows, batch_size=2000)
    AccessLog.objects.bulk_create(
        [
            AccessLog(
                agent=agent,
                thread_id=thread_pk,
                user_id=user_id,
                source="context",
                at=now,
                item_ids=[rows[(k * 5 + j) % len(rows)].pk for j in range(5)] if rows else [],
                entry_ids=last,
            )
            for k, (thread_pk, last) in enumerate(last_of_thread.items())
        ],
        batch_size=2000,
    )
    JobRun.objects.bulk_create(
        [
            JobRun(kind="extract", agent_id=agent.pk, arguments={"user_id": user_id, "thread_pk": thread.pk})
            for thread in made[::10]
        ]
    )
    Evidence.objects.bulk_create(
        [
            Evidence(agent=agent, item=item, entry_id=entry_ids[k % len(entry_ids)], quote="vegetarian food")
            for k, item in enumerate(rows)
        ],
        batch_size=2000,
    )
    versions: list[MemoryFileVersion] = []
    for f in range(max(1, items // 100)):
        for sequence in (1, 2, 3):
            body = f"# notes {f}\n" + _text(f * 3 + sequence) + "\n"
            versions.append(
                MemoryFileVersion(
                    agent=agent,
                    user_id=user_id,
                    path=f"/memories/note-{f}.md",
                    sequence=sequence,
                    content=body,
                    size=len(body),
                )
            )
    MemoryFileVersion.objects.bulk_create(versions, batch_size=2000)


def copy_baseline(scope: PersonScope, path: Path, *, vectors: bool) -> tuple[int, int, float]:
    """COPY the person's rows (those the export writes) to a file: rows, bytes, seconds."""
    queries: list[QuerySet[Any]] = [
        scope.entries().defer("embedding", "search_vector"),
        scope.all_items().defer("embedding", "search_vector"),
        Evidence.objects.filter(item__in=scope.all_items()),
        scope.file_versions(),
        scope.messages_elsewhere().defer("embedding", "search_vector"),
        scope.job_runs(),
        scope.access_log(),
    ]
    if vectors:
        queries += [scope.entries().only("id", "embedding"), scope.all_items().only("id", "embedding")]
    rows = 0
    started = time.perf_counter()
    # The export reads the access log with the same room for its hashes of the person's ids.
    with path.open("wb") as out, access_log_person_reading(), connection.cursor() as cursor:
        for queryset in queries:
            sql, params = queryset.query.sql_with_params()
            raw = cursor.cursor  # psycopg's own cursor: COPY ... TO STDOUT
            with raw.copy(f"COPY ({sql}) TO STDOUT", params) as copy:
                for chunk in copy:
                    out.write(chunk)
                    rows += bytes(chunk).count(b"\n")
        out.flush()
        os.fsync(out.fileno())
    return rows, path.stat().st_size, time.perf_counter() - started


CHILD = """
import os, sys, time
sys.path.insert(0, {root!r})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ["EMBEDDER"] = "fake"
os.environ["EXPORT_DIR"] = {export_dir!r}
import django
django.setup()
{work}
"""


def export_in_child(request_id: int, export_dir: Path) -> float:
    """Run the export job in a process of its own (so its peak RSS is its own); its seconds."""
    work = (
        "from governance.export.services import export_run\n"
        "started = time.perf_counter()\n"
        f"export_run(request_id={request_id})\n"
        "print(time.perf_counter() - started)"
    )
    code = CHILD.format(root=str(Path(__file__).resolve().parent.parent), export_dir=str(export_dir), work=work)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def bare_rss() -> int:
    """Peak RSS (KB) of a process that only sets Django up, as the export's child does."""
    code = CHILD.format(
        root=str(Path(__file__).resolve().parent.parent),
        export_dir="/nonexistent",
        work="import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)",
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(done.stdout.strip().splitlines()[-1])


def cleanup(agent: Agent) -> None:
    """Delete the bench agent's rows in bulk (the ORM's cascade would load 100,000 entries first)."""
    tables = [
        (Evidence._meta.db_table, "agent_id"),
        ("memoryapp_itemreview", "agent_id"),
        (MemoryItem._meta.db_table, "agent_id"),
        ("memoryapp_entity", "agent_id"),
        (MemoryFileVersion._meta.db_table, "agent_id"),
        (AccessLog._meta.db_table, "agent_id"),
        (JobRun._meta.db_table, "agent_id"),
        (Entry._meta.db_table, "agent_id"),
        (Thread._meta.db_table, "agent_id"),
    ]
    with connection.cursor() as cursor:
        for table, column in tables:
            cursor.execute(f'DELETE FROM "{table}" WHERE "{column}" = %s', [agent.pk])
    agent.delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--vectors", action="store_true", help="vectors on every row, and the request asks for them")
    options = parser.parse_args()

    agent = Agent.objects.create(slug=f"bench-export-{uuid.uuid4().hex[:8]}", name="bench export")
    person = f"u-bench-{uuid.uuid4().hex[:6]}"
    export_dir = Path(tempfile.mkdtemp(prefix="bench-export-"))
    settings.EXPORT_DIR = export_dir
    request: ExportRequest | None = None
    try:
        started = time.perf_counter()
        seed(
            agent,
            user_id=person,
            threads=options.threads,
            turns=options.turns,
            items=options.items,
            vectors=options.vectors,
        )
        seed(
            agent,
            user_id=person + "-other",
            threads=max(1, options.threads // 10),
            turns=options.turns,
            items=options.items // 10,
            guest=person,
            vectors=options.vectors,
        )
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(f"seeded in {time.perf_counter() - started:.1f} s")
        scope = PersonScope(user_id=person, agent_ids=(agent.pk,))

        copy_rows, copy_bytes, copy_seconds = copy_baseline(
            scope, export_dir / "baseline.copy", vectors=options.vectors
        )
        (export_dir / "baseline.copy").unlink()

        # Filed without its job (the child runs it): the service would send it, eagerly here.
        request = ExportRequest.objects.create(
            user_id=person, agent_ids=[agent.pk], include_vectors=options.vectors, requested_by="bench"
        )
        export_seconds = export_in_child(request.pk, export_dir)
        child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        request.refresh_from_db()
        counts = request.counts
        export_rows = sum(
            counts.get(k, 0)
            for k in (
                "entries",
                "items",
                "facts",
                "evidence",
                "file_versions",
                "threads",
                "entities",
                "audit_records",
                "messages_elsewhere",
                "job_runs",
                "access_log",
                "vectors",
            )
        )
        path = export_archive_path(request)
        assert path is not None
        with zipfile.ZipFile(path) as archive:
            manifest = json.loads(archive.read("manifest.json"))
        jsonl_bytes = sum(part["bytes"] for part in manifest["parts"])
        archive_bytes = request.archive_size or 0

        print(
            f"person: {counts['threads']:,} threads, {counts['entries']:,} entries, {counts['items']:,} items, "
            f"{counts['facts']:,} facts, {counts['evidence']:,} quotes, {counts['file_versions']:,} file versions, "
            f"{counts['messages_elsewhere']:,} messages elsewhere, {counts['job_runs']:,} job runs, "
            f"{counts['access_log']:,} access-log rows, {counts.get('vectors', 0):,} vectors"
        )
        print(
            f"baseline COPY to a file: {copy_rows:,} rows, {copy_bytes / 1e6:.1f} MB in {copy_seconds:.2f} s: "
            f"{copy_rows / copy_seconds:,.0f} rows/s, {copy_bytes / 1e6 / copy_seconds:.1f} MB/s"
        )
        print(
            f"export to a zip:         {export_rows:,} rows, {jsonl_bytes / 1e6:.1f} MB of JSONL "
            f"({archive_bytes / 1e6:.1f} MB zipped) in {export_seconds:.2f} s: "
            f"{export_rows / export_seconds:,.0f} rows/s, {jsonl_bytes / 1e6 / export_seconds:.1f} MB/s of JSONL, "
            f"{archive_bytes / 1e6 / export_seconds:.1f} MB/s of archive"
        )
        print(
            f"export / COPY: {export_seconds / copy_seconds:.1f}x the time; "
            f"{(jsonl_bytes / export_seconds) / (copy_bytes / copy_seconds):.2f}x the MB/s; "
            f"peak RSS of the process that exported: {child_rss / 1024:.0f} MB "
            f"(a bare Django process of this project: {bare_rss() / 1024:.0f} MB)"
        )
    finally:
        if request is not None and (path := export_archive_path(request)) is not None:
            path.unlink()
        cleanup(agent)
        for leftover in export_dir.iterdir():
            leftover.unlink()
        export_dir.rmdir()


if __name__ == "__main__":
    main()
