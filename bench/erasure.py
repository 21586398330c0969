"""Bench: erase a person through an erasure request, at two sizes, among other people's data.

    python bench/erasure.py [--large 1.0] [--small 0.1] [--others 1.0]

At scale 1 the person has 1,000 threads of 100 entries (100,000 entries) in two agents, 20,000
memory items (a quarter with a quote of one of their entries), and other people hold as much again
(`--others` times the person's size, spread over ten people, in the same agents). Rows are written
with INSERT ... SELECT generate_series on the server (no Python per row).

For each size (small first), in the same run:
  - baseline: the same rows of a twin person (filled identically) removed by raw SQL: DELETE of the
    evidence, items, entries and threads, one statement each, one transaction: the floor;
  - the erasure request filed and run as the service runs it (the job eagerly, in this process):
    holds, samples, `person_erase` in batches, the leftover scan over every table, the report;
    each step timed (the report's `seconds`), rows erased per second.
Then the ratio large / small of the erasure's time (target: ten times the data in at most twelve
times as long; the large erasure under 60 s).

Mentions (`--mentions 10000`, at `--mentions-scale`, 0 to skip): two people with the same data of
their own, each erased by a request giving her e-mail and name as other identifiers; the second is
also named (name and e-mail) in `--mentions` rows of others, half other people's turns in their
threads, half agent-wide items, each with a vector. Printed: each erasure's time and steps, the rows
redacted and cleared for re-embedding (the report's tally, vectors apart), and the ratio to the
erasure without mentions, same run. `--mentions-only` skips the two sizes above.
Every bench row is deleted at the end. It never asserts a duration.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ.setdefault("EMBEDDER", "fake")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The erasure job runs in this process: no job may be sent to a broker a running service listens to.
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from governance.erasure.services import erasure_request_file  # noqa: E402
from governance.models import ErasureRequest  # noqa: E402
from memoryapp.agents.services import agent_get_or_create  # noqa: E402
from memoryapp.models import Agent  # noqa: E402

THREADS = 1000
ENTRIES_PER_THREAD = 100
ITEMS = 20_000
OTHER_PEOPLE = 10

THREADS_SQL = """
INSERT INTO memoryapp_thread (agent_id, external_id, user_id, metadata, next_seq, branch_epoch, extraction,
                              memory_enabled, on_busy, compaction, created_at, updated_at)
SELECT (%(agents)s::bigint[])[1 + n %% 2], %(person)s || '-t' || n, %(person)s, '{}', %(per)s + 1, 0, '{}',
       true, '', '{}', now(), now()
FROM generate_series(1, %(threads)s) AS n
"""

ENTRIES_SQL = """
INSERT INTO memoryapp_entry (id, agent_id, thread_id, parent_id, seq, type, role, content, text, tool_calls,
                             tool_call_id, tool_name, sender_name, token_count, event, metadata, created_at,
                             content_hash)
SELECT 'ent_b' || t.id || 'x' || s, t.agent_id, t.id,
       CASE WHEN s = 1 THEN NULL ELSE 'ent_b' || t.id || 'x' || (s - 1) END,
       s, 'message', CASE WHEN s %% 2 = 1 THEN 'user' ELSE 'assistant' END,
       to_jsonb(w.text), w.text, NULL, '', '', '', 30, NULL, '{}', now(), left(md5(w.text), 32)
FROM memoryapp_thread AS t
CROSS JOIN generate_series(1, %(per)s) AS s
CROSS JOIN LATERAL (
    SELECT 'On turn ' || s || ' ' || t.user_id || ' wrote about ' || md5(t.id || ':' || s) || ' and '
           || md5(s || ':' || t.id) || ' again' AS text
) AS w
WHERE t.user_id = %(person)s
"""

LEAVES_SQL = """
UPDATE memoryapp_thread SET active_leaf_id = 'ent_b' || id || 'x' || %(per)s WHERE user_id = %(person)s
"""

ITEMS_SQL = """
INSERT INTO memoryapp_memoryitem (agent_id, user_id, project_id, thread_id, id, kind, entity_id, subject,
                                  subject_hash, attribute, value, value_json, namespace, trust, status, confidence,
                                  verified, valid_from, recorded_at, activated_at, times_retrieved, prompt_version,
                                  metadata, purposes)
SELECT (%(agents)s::bigint[])[1 + n %% 2], %(person)s, '', '', 'itm_b' || md5(%(person)s || n), 'fact', NULL,
       %(person)s, %(person)s, 'attribute ' || n, 'the value ' || md5(n || %(person)s) || ' of ' || %(person)s, NULL, '',
       'user', 'active', 1.0, false, now(), now(), now(), 0, '', '{}', '{}'
FROM generate_series(1, %(items)s) AS n
"""

EVIDENCE_SQL = """
INSERT INTO memoryapp_evidence (agent_id, item_id, entry_id, quote, status, created_at)
SELECT i.agent_id, i.id, e.id, left(e.text, 40), 'verified', now()
FROM (
    SELECT i.agent_id, i.id, row_number() OVER (ORDER BY i.id) AS k
    FROM memoryapp_memoryitem AS i WHERE i.user_id = %(person)s
) AS i
JOIN LATERAL (
    SELECT e.id, e.text FROM memoryapp_entry AS e
    JOIN memoryapp_thread AS t ON t.id = e.thread_id
    WHERE t.user_id = %(person)s AND t.agent_id = i.agent_id AND t.external_id = %(person)s || '-t' || (1 + i.k %% %(threads)s)
      AND e.seq = 1
) AS e ON true
WHERE i.k %% 4 = 0
"""


MENTION_THREADS_SQL = """
INSERT INTO memoryapp_thread (agent_id, external_id, user_id, metadata, next_seq, branch_epoch, extraction,
                              memory_enabled, on_busy, compaction, created_at, updated_at)
SELECT (%(agents)s::bigint[])[1 + n %% 2], %(host)s || '-t' || n, %(host)s, '{}', %(per)s + 1, 0, '{}',
       true, '', '{}', now(), now()
FROM generate_series(1, %(threads)s) AS n
"""

MENTION_ENTRIES_SQL = """
INSERT INTO memoryapp_entry (id, agent_id, thread_id, parent_id, seq, type, role, content, text, tool_calls,
                             tool_call_id, tool_name, sender_name, token_count, event, metadata, created_at,
                             content_hash, embedding, embedded_at)
SELECT 'ent_m' || t.id || 'x' || s, t.agent_id, t.id,
       CASE WHEN s = 1 THEN NULL ELSE 'ent_m' || t.id || 'x' || (s - 1) END,
       s, 'message', 'user', to_jsonb(w.text), w.text, NULL, '', '', '', 30, NULL, '{}', now(),
       left(md5(w.text), 32), %(vector)s::vector, now()
FROM memoryapp_thread AS t
CROSS JOIN generate_series(1, %(per)s) AS s
CROSS JOIN LATERAL (
    SELECT 'Turn ' || s || ': please ask ' || %(name)s || ' (' || %(email)s || ') about order ' || md5(t.id || ':' || s)
           AS text
) AS w
WHERE t.user_id = %(host)s
"""

MENTION_ITEMS_SQL = """
INSERT INTO memoryapp_memoryitem (agent_id, user_id, project_id, thread_id, id, kind, entity_id, subject,
                                  subject_hash, attribute, value, value_json, namespace, trust, status, confidence,
                                  verified, valid_from, recorded_at, activated_at, times_retrieved, prompt_version,
                                  metadata, purposes, embedding, embedded_at)
SELECT (%(agents)s::bigint[])[1 + n %% 2], '', '', '', 'itm_m' || md5(%(host)s || n), 'fact', NULL,
       'escalations', 'escalations', 'contact ' || n, 'escalate case ' || n || ' to ' || %(name)s || ' at ' || %(email)s, NULL, '',
       'user', 'active', 1.0, false, now(), now(), now(), 0, '', '{}', '{}', %(vector)s::vector, now()
FROM generate_series(1, %(items)s) AS n
"""


def fill_mentions(*, host: str, name: str, email: str, agents: list[int], rows: int) -> int:
    """`rows` rows of others naming the person: half turns of `host`'s threads, half agent-wide items."""
    turns = rows // 2
    values: dict[str, Any] = {
        "host": host,
        "agents": agents,
        "name": name,
        "email": email,
        "per": min(ENTRIES_PER_THREAD, turns),
        "threads": max(1, turns // ENTRIES_PER_THREAD),
        "items": rows - turns,
        "vector": "[" + ",".join(["0.01"] * settings.EMBEDDING_DIMENSIONS) + "]",
    }
    written = 0
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in (MENTION_THREADS_SQL, MENTION_ENTRIES_SQL, MENTION_ITEMS_SQL):
            cursor.execute(statement, values)
            written += cursor.rowcount if statement is not MENTION_THREADS_SQL else 0
        cursor.execute(
            "UPDATE memoryapp_thread SET active_leaf_id = 'ent_m' || id || 'x' || %s WHERE user_id = %s",
            [values["per"], host],
        )
    return written


def erase_timed(person: str, *, identifiers: list[str]) -> dict[str, Any]:
    """The person's erasure request, filed and run in this process: its time and its report."""
    began = time.perf_counter()
    request = erasure_request_file(user_id=person, identifiers=identifiers, actor="bench", reason="bench")
    total = time.perf_counter() - began
    request = ErasureRequest.objects.get(pk=request.pk)
    assert request.status == "done", f"the request ended {request.status}: {request.error}"
    return {"total": total, "report": request.report or {}}


def run_mentions(*, scale: float, mentions: int, agents: list[int], tag: str) -> None:
    """The erasure of a person named in `mentions` rows of others, against one named nowhere."""
    cases = {}
    for case in ("baseline", "mentioned"):
        person = f"bench-{tag}-{case}-person"
        name, email = f"Zelinda Quartzmoor{case.title()}", f"zelinda.{tag}.{case}@example.org"
        rows = fill(person, agents=agents, scale=scale)
        named = 0
        if case == "mentioned":
            named = fill_mentions(host=f"bench-{tag}-host", name=name, email=email, agents=agents, rows=mentions)
        cases[case] = (person, [email, name], rows, named)
    analyze()
    print(
        f"[mentions] two people of {cases['baseline'][2]} rows each (scale {scale}); the second named by name and"
        f" e-mail in {cases['mentioned'][3]} rows of others ({mentions // 2} turns in another person's threads,"
        f" {mentions - mentions // 2} agent-wide items, each with a vector)"
    )
    measured = {}
    for case, (person, identifiers, _, _) in cases.items():
        done = erase_timed(person, identifiers=identifiers)
        report = done["report"]
        tables = report.get("tables", {})
        redacted = sum(kinds.get("redacted", 0) for kinds in tables.values())
        re_embedded = sum(kinds.get("re_embedded", 0) + kinds.get("vectors_cleared", 0) for kinds in tables.values())
        deleted = sum(kinds.get("deleted", 0) for kinds in tables.values())
        mention_counts = {k: v for k, v in (report.get("counts") or {}).items() if k.startswith("mentions") and v}
        seconds = report.get("seconds", {})
        measured[case] = done["total"]
        print(
            f"  {case:<9}: {done['total']:7.2f} s (person_erase {float(seconds.get('erasing', 0)):.2f} s, leftover scan"
            f" {float(seconds.get('scanning', 0)):.2f} s); rows deleted {deleted}, redacted {redacted},"
            f" vectors cleared to re-embed {re_embedded}; mentions {mention_counts or 'none'}"
        )
    print(
        f"  ratio with {mentions} mentions / without: {measured['mentioned'] / measured['baseline']:.2f}x the time"
        f" (+{measured['mentioned'] - measured['baseline']:.2f} s, "
        f"{(measured['mentioned'] - measured['baseline']) / max(1, mentions) * 1e6:.0f} us a mention)"
    )


def fill(person: str, *, agents: list[int], scale: float) -> int:
    """The person's threads, entries, items and quotes; the rows written."""
    threads = max(2, round(THREADS * scale))
    items = max(4, round(ITEMS * scale))
    values: dict[str, Any] = {
        "person": person,
        "agents": agents,
        "threads": threads,
        "per": ENTRIES_PER_THREAD,
        "items": items,
    }
    rows = 0
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in (THREADS_SQL, ENTRIES_SQL, LEAVES_SQL, ITEMS_SQL, EVIDENCE_SQL):
            cursor.execute(statement, values)
            rows += cursor.rowcount if statement is not LEAVES_SQL else 0
    return rows


def raw_delete(person: str) -> int:
    """The floor: the person's rows removed with one DELETE per table, one transaction."""
    deleted = 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM memoryapp_evidence WHERE item_id IN (SELECT id FROM memoryapp_memoryitem WHERE user_id = %s)"
            " OR entry_id IN (SELECT e.id FROM memoryapp_entry e JOIN memoryapp_thread t ON t.id = e.thread_id"
            " WHERE t.user_id = %s)",
            [person, person],
        )
        deleted += cursor.rowcount
        cursor.execute("DELETE FROM memoryapp_memoryitem WHERE user_id = %s", [person])
        deleted += cursor.rowcount
        cursor.execute("UPDATE memoryapp_thread SET active_leaf_id = NULL WHERE user_id = %s", [person])
        cursor.execute(
            "DELETE FROM memoryapp_entry WHERE thread_id IN (SELECT id FROM memoryapp_thread WHERE user_id = %s)",
            [person],
        )
        deleted += cursor.rowcount
        cursor.execute("DELETE FROM memoryapp_thread WHERE user_id = %s", [person])
        deleted += cursor.rowcount
    return deleted


def analyze() -> None:
    with connection.cursor() as cursor:
        for table in ("memoryapp_thread", "memoryapp_entry", "memoryapp_memoryitem", "memoryapp_evidence"):
            cursor.execute(f"ANALYZE {table}")


def run_size(label: str, scale: float, *, agents: list[int], others: float, tag: str) -> dict[str, Any]:
    person, twin = f"bench-{tag}-{label}-person", f"bench-{tag}-{label}-twin"
    began = time.perf_counter()
    rows = fill(person, agents=agents, scale=scale)
    fill(twin, agents=agents, scale=scale)
    other_rows = 0
    for n in range(OTHER_PEOPLE):
        other_rows += fill(f"bench-{tag}-{label}-other{n}", agents=agents, scale=scale * others / OTHER_PEOPLE)
    analyze()
    print(
        f"[{label}] scale {scale}: the person holds {rows} rows "
        f"({max(2, round(THREADS * scale))} threads, {max(2, round(THREADS * scale)) * ENTRIES_PER_THREAD} entries, "
        f"{max(4, round(ITEMS * scale))} items); a twin as much; {other_rows} rows of {OTHER_PEOPLE} other people "
        f"(filled in {time.perf_counter() - began:.1f} s)"
    )

    began = time.perf_counter()
    floor_rows = raw_delete(twin)
    floor = time.perf_counter() - began
    print(f"  baseline raw DELETE of the twin's rows: {floor:7.2f} s   {floor_rows / floor:10,.0f} rows/s")

    began = time.perf_counter()
    request = erasure_request_file(user_id=person, actor="bench", reason="bench")
    total = time.perf_counter() - began
    request = ErasureRequest.objects.get(pk=request.pk)
    assert request.status == "done", f"the request ended {request.status}: {request.error}"
    report = request.report or {}
    seconds = report.get("seconds", {})
    erased = int(report.get("erased_total", 0))
    erasing = float(seconds.get("erasing", total))
    print(
        f"  erasure request (job in process):     {total:7.2f} s   "
        f"(sampling {seconds.get('sampling', 0):.2f} s, person_erase {erasing:.2f} s, "
        f"leftover scan {seconds.get('scanning', 0):.2f} s)"
    )
    print(
        f"  person_erase: {erased} rows counted erased, {erased / erasing:10,.0f} rows/s;"
        f" {rows / erasing:10,.0f} of the person's rows/s; {erasing / floor:.1f}x the raw DELETE"
    )
    print(f"  counts: {report.get('counts')}")
    print(
        f"  leftover scan: {report.get('scan', {}).get('found')} found, over "
        f"{sum(t['rows'] for t in report.get('scan', {}).get('tables', []))} rows in "
        f"{len(report.get('scan', {}).get('tables', []))} tables; outcome {report.get('outcome')}"
    )
    return {"total": total, "erasing": erasing, "rows": rows, "floor": floor}


def cleanup(tag: str, agents: list[int]) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        like = f"bench-{tag}-%"
        cursor.execute(
            "DELETE FROM memoryapp_evidence WHERE item_id IN (SELECT id FROM memoryapp_memoryitem WHERE user_id LIKE %s)",
            [like],
        )
        cursor.execute("DELETE FROM memoryapp_memoryitem WHERE user_id LIKE %s", [like])
        cursor.execute("UPDATE memoryapp_thread SET active_leaf_id = NULL WHERE user_id LIKE %s", [like])
        cursor.execute(
            "DELETE FROM memoryapp_entry WHERE thread_id IN (SELECT id FROM memoryapp_thread WHERE user_id LIKE %s)",
            [like],
        )
        cursor.execute("DELETE FROM memoryapp_thread WHERE user_id LIKE %s", [like])
    Agent.objects.filter(pk__in=agents).delete()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--large", type=float, default=1.0, help="scale of the large person (1.0: 1,000 threads)")
    parser.add_argument("--small", type=float, default=0.1, help="scale of the small person")
    parser.add_argument("--others", type=float, default=1.0, help="other people's data, times the person's")
    parser.add_argument("--mentions", type=int, default=10_000, help="rows of others naming a person (0: skip)")
    parser.add_argument("--mentions-scale", type=float, default=0.1, help="scale of the two people's own data")
    parser.add_argument("--mentions-only", action="store_true", help="only the mentions comparison")
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    agents = [agent_get_or_create(slug=f"bench-erase-{tag}-{n}")[0].pk for n in (1, 2)]
    try:
        if args.mentions:
            run_mentions(scale=args.mentions_scale, mentions=args.mentions, agents=agents, tag=tag)
        if args.mentions_only:
            return
        small = run_size("small", args.small, agents=agents, others=args.others, tag=tag)
        large = run_size("large", args.large, agents=agents, others=args.others, tag=tag)
    finally:
        cleanup(tag, agents)
    data = large["rows"] / small["rows"]
    print(
        f"ratio large / small: {data:.1f}x the data, person_erase {large['erasing'] / small['erasing']:.1f}x as long, "
        f"the whole request {large['total'] / small['total']:.1f}x as long "
        f"(target: at most {1.2 * data:.0f}x); raw DELETE {large['floor'] / small['floor']:.1f}x"
    )
    print(f"large request: {large['total']:.1f} s (target: under 60 s)")


if __name__ == "__main__":
    main()
