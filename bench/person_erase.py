"""Erasure of a person (`person_erase`) at two sizes, against raw deletes of the same rows.

Uses the database of the Django settings (the embedded PostgreSQL under var/ unless DATABASE_URL is
set; run `manage.py migrate` first). Creates an agent of its own, `bench-erasure-<random>`, and
deletes what it wrote at the end (the audit records stay, as audit records do).

1. The sample (not measured), written in bulk: for each size, two people with the same shape,
   `--threads` threads of `--entries` entries each (user and assistant turns alternating) and
   `--items` items, one quoting an entry of theirs, and one memory file; the small size is one
   tenth. Among them `--others` other people with threads and items of their own.
2. Baseline, in the same run: the second person of each size removed with raw SQL (DELETE of
   their evidence, items, entries, threads and files by user_id): what the database itself costs.
3. `person_erase` of the first person of each size (batches of `--batch-size` threads), timed.
4. Prints the times, rows per second, the ratio of the two sizes (target: ten times the data in at
   most twelve times the time) and each against its baseline; checks the other people are whole.

    python bench/person_erase.py [--threads 1000] [--entries 100] [--items 20000] [--batch-size 200]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ["EMBEDDER"] = "fake"
os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"

import django

django.setup()

from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from memoryapp.files.access import FileAccess  # noqa: E402
from memoryapp.files.services import file_put  # noqa: E402
from memoryapp.forgetting.person import person_erase  # noqa: E402
from memoryapp.models import Agent, Entry, Evidence, MemoryFileVersion, MemoryItem, Thread  # noqa: E402

TEXTS = (
    "Could you plan a day in Rome for us, starting early and avoiding the big queues?",
    "Start at the Colosseum at eight, then walk over the Palatine Hill to the Forum.",
)


def person_write(agent: Agent, user_id: str, *, threads: int, entries: int, items: int) -> int:
    """Bulk-write one person's sample; returns its rows (threads + entries + items + evidence)."""
    now = timezone.now()
    made = Thread.objects.bulk_create(
        [Thread(agent=agent, external_id=f"{user_id}-{i}", user_id=user_id) for i in range(threads)], batch_size=2000
    )
    rows: list[Entry] = []
    quotable: list[str] = []
    for thread in made:
        parent = None
        for seq in range(1, entries + 1):
            entry_id = f"ent_{uuid.uuid4().hex}"
            text = TEXTS[seq % 2]
            rows.append(
                Entry(
                    id=entry_id,
                    agent=agent,
                    thread=thread,
                    parent_id=parent,
                    seq=seq,
                    role="user" if seq % 2 else "assistant",
                    content=text,
                    text=text,
                    content_hash=uuid.uuid4().hex,
                    token_count=20,
                    created_at=now,
                )
            )
            if seq % 2:
                quotable.append(entry_id)
            parent = entry_id
        thread.next_seq = entries + 1
        thread.active_leaf_id = parent
    Entry.objects.bulk_create(rows, batch_size=5000)
    Thread.objects.bulk_update(made, ["next_seq", "active_leaf"], batch_size=2000)
    item_rows = [
        MemoryItem(
            id=f"itm_{uuid.uuid4().hex}",
            agent=agent,
            user_id=user_id,
            subject=user_id,
            attribute=f"fact {i}",
            value=f"value {i} of {user_id}",
            status="active",
            trust="user",
            valid_from=now,
            recorded_at=now,
            activated_at=now,
        )
        for i in range(items)
    ]
    MemoryItem.objects.bulk_create(item_rows, batch_size=5000)
    Evidence.objects.bulk_create(
        [
            Evidence(agent=agent, item=item, entry_id=quotable[i % len(quotable)], quote="plan a day in Rome")
            for i, item in enumerate(item_rows)
        ],
        batch_size=5000,
    )
    file_put(access=FileAccess(agent=agent, user_id=user_id, reserved=()), path="/memories/me.md", text="me\n")
    return threads + len(rows) + 2 * items


def raw_delete(agent: Agent, user_id: str) -> None:
    """The baseline: the same rows removed with plain SQL in one transaction."""
    with transaction.atomic(), connection.cursor() as cursor:
        args: dict[str, int | str] = {"agent": agent.pk, "user": user_id}
        cursor.execute(
            "DELETE FROM memoryapp_evidence WHERE item_id IN "
            "(SELECT id FROM memoryapp_memoryitem WHERE agent_id = %(agent)s AND user_id = %(user)s)",
            args,
        )
        cursor.execute("DELETE FROM memoryapp_memoryitem WHERE agent_id = %(agent)s AND user_id = %(user)s", args)
        cursor.execute(
            "UPDATE memoryapp_thread SET active_leaf_id = NULL WHERE agent_id = %(agent)s AND user_id = %(user)s", args
        )
        cursor.execute(
            "DELETE FROM memoryapp_entry WHERE thread_id IN "
            "(SELECT id FROM memoryapp_thread WHERE agent_id = %(agent)s AND user_id = %(user)s)",
            args,
        )
        cursor.execute("DELETE FROM memoryapp_thread WHERE agent_id = %(agent)s AND user_id = %(user)s", args)
        cursor.execute(
            "DELETE FROM memoryapp_memoryfileversion WHERE agent_id = %(agent)s AND user_id = %(user)s", args
        )


def timed(label: str, call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    seconds = time.perf_counter() - started
    print(f"  {label}: {seconds:.2f} s", flush=True)
    return seconds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=100, help="entries a thread")
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--others", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=200)
    args = parser.parse_args(argv)

    agent, _ = Agent.objects.get_or_create(slug=f"bench-erasure-{uuid.uuid4().hex[:8]}")
    sizes = {
        "small": (max(1, args.threads // 10), args.entries, max(1, args.items // 10)),
        "large": (args.threads, args.entries, args.items),
    }
    print(f"writing the sample (agent {agent.slug}) ...", flush=True)
    rows: dict[str, int] = {}
    for name, (threads, entries, items) in sizes.items():
        rows[name] = person_write(agent, f"u-{name}", threads=threads, entries=entries, items=items)
        person_write(agent, f"u-{name}-base", threads=threads, entries=entries, items=items)
    for i in range(args.others):
        person_write(agent, f"u-other-{i}", threads=20, entries=args.entries, items=200)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    others_before = Entry.objects.filter(agent=agent, thread__user_id__startswith="u-other-").count()

    results: dict[str, tuple[float, float]] = {}
    for name in ("small", "large"):
        threads, entries, items = sizes[name]
        print(f"{name}: {threads} threads, {threads * entries} entries, {items} items ({rows[name]} rows)")
        base = timed("baseline, raw SQL delete", functools.partial(raw_delete, agent, f"u-{name}-base"))
        erase = timed(
            "person_erase",
            functools.partial(person_erase, user_id=f"u-{name}", agent_ids=[agent.pk], batch_size=args.batch_size),
        )
        results[name] = (erase, base)
        print(f"  {rows[name] / erase:,.0f} rows/s erased; {rows[name] / base:,.0f} rows/s raw; x{erase / base:.1f}")
        assert not Thread.objects.filter(agent=agent, user_id=f"u-{name}").exists()
        assert not MemoryItem.objects.filter(agent=agent, user_id=f"u-{name}").exists()
    others_after = Entry.objects.filter(agent=agent, thread__user_id__startswith="u-other-").count()
    ratio = results["large"][0] / results["small"][0]
    print(
        f"ten times the data took {ratio:.1f} times as long (target <= 12); "
        f"large erasure {results['large'][0]:.1f} s (target < 60 s); "
        f"other people's entries {others_before} before, {others_after} after"
    )
    for i in range(args.others):
        person_erase(user_id=f"u-other-{i}", agent_ids=[agent.pk])
    MemoryFileVersion.objects.filter(agent=agent).delete()
    agent.delete()


if __name__ == "__main__":
    main()
