"""What sealing a row under several people's keys costs the writes (issue 25 §6): entries/s of batch
and single appends whose every turn names two registered people, sealed under one key (as before:
the thread's person's) and under the key set of the thread's person and both of them (now), with
turns naming no one beside them, interleaved in one run, and the ratios.

Uses the database of the Django settings (the embedded PostgreSQL under VAR_DIR unless DATABASE_URL
is set; run `manage.py migrate` first), with encryption on (a generated master key, a temporary key
store). Creates an agent of its own, `bench-keysets-*`, and deletes it (and its data keys) at the end.

Each write is `thread_append` in this process, committed (embedding and extraction left out). The
agent registered `--people` people (a name and an e-mail each); screening is off (every category
`allow`). The cases take turns write by write, in a new random order each round, each into a thread
of its own (Carl's):

- one key: turns naming two registered people, with the key sets switched off in this process
  (their `key_people` left empty: sealed under the thread's person's key alone, as before);
- key sets: the same turns, sealed under the key set of Carl and the two people named;
- no one: turns naming no one (the detector's gate, one key).

Prints entries/s, the client's CPU per entry (this process: what matching, deriving and sealing
cost, whatever the machine's load), the ratios against `one key` (of the totals and of the median
write times), the key sets the run made and what deriving one costs, and that each row opens.

    python bench/key_sets.py [--rounds 20] [--batch-size 50] [--singles 10] [--people 100]
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ["EMBEDDER"] = "fake"
os.environ["LLM_PROVIDER"] = "none"
os.environ["CELERY_TASK_ALWAYS_EAGER"] = "0"

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from governance.crypto import envelope  # noqa: E402
from governance.crypto.envelope import data_keys_forget, key_set_ids  # noqa: E402
from governance.crypto.fields import text_open, value_aad  # noqa: E402
from governance.crypto.sealing import sealed_key_id  # noqa: E402
from governance.models import DataKey  # noqa: E402
from memoryapp.models import Agent, Entry, Thread  # noqa: E402
from memoryapp.screening.identifiers import identifiers_set  # noqa: E402
from memoryapp.screening.policy import DEFAULTS, screening_policy_set  # noqa: E402
from memoryapp.threads import hooks  # noqa: E402
from memoryapp.threads import services as thread_services  # noqa: E402
from memoryapp.threads.services import thread_append, thread_create  # noqa: E402

SENTENCES = (
    "Could you plan a day in Rome for us, starting early and avoiding the big queues?",
    "Start at the Colosseum at eight, then walk over the Palatine Hill to the Forum.",
    "We are vegetarian, and my daughter does not like long walks in the afternoon heat.",
    "Then lunch near Campo de' Fiori, a siesta, and the Pantheon after five o'clock.",
    "Book the table for four people at half past seven, near the Trastevere bridge.",
)
CASES = ("one key", "key sets", "no one")


def naming(n: int, people: int) -> str:
    a, b = n % people, (n * 7 + 3) % people
    return f"Marta Rossi{a} and Luca Bianchi{b} will join the Rome day; {SENTENCES[n % len(SENTENCES)]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="rounds; each makes one write of each kind per case")
    parser.add_argument("--batch-size", type=int, default=50, help="entries of a batch append")
    parser.add_argument("--singles", type=int, default=10, help="single appends per case per round")
    parser.add_argument("--people", type=int, default=100, help="pairs of people registered (a Marta, a Luca)")
    args = parser.parse_args()

    for name in ("embedding", "extraction"):
        hooks._followers.pop(name, None)
    keystore = tempfile.TemporaryDirectory(prefix="bench-keysets-")
    settings.MEMORY_KEYSTORE_DIR = Path(keystore.name)
    settings.MEMORY_ENCRYPTION_KEYS = f"bench:{secrets.token_hex(32)}"
    data_keys_forget()
    tag = uuid.uuid4().hex[:8]
    agent = Agent.objects.create(slug=f"bench-keysets-{tag}", name="key sets bench")
    screening_policy_set(agent=agent, values=dict.fromkeys(DEFAULTS, "allow"), actor="bench")
    for n in range(args.people):
        identifiers_set(
            agent=agent,
            user_id=f"p-m{n}",
            body={"emails": [f"marta.rossi{n}@example.org"], "names": [f"Marta Rossi{n}"]},
            actor="bench",
        )
        identifiers_set(
            agent=agent,
            user_id=f"p-l{n}",
            body={"emails": [f"luca.bianchi{n}@example.org"], "names": [f"Luca Bianchi{n}"]},
            actor="bench",
        )
    threads = {
        case: thread_create(agent=agent, external_id=f"bench-{i}-{tag}", user_id="u-carl")
        for i, case in enumerate(CASES)
    }
    keep_key_people = thread_services.key_people_set

    def one_key(row: Any, people: Any, *, owner_person: str | None = None) -> None:
        row.key_people = None

    seconds: dict[tuple[str, str], float] = {}
    cpu: dict[tuple[str, str], float] = {}
    entries: dict[tuple[str, str], int] = {}
    times: dict[tuple[str, str], list[float]] = {}
    counter = 0

    def specs(case: str, n: int) -> list[dict[str, Any]]:
        nonlocal counter
        made = []
        for i in range(n):
            at = counter + i
            text = SENTENCES[at % len(SENTENCES)] if case == "no one" else naming(at, args.people)
            made.append({"role": "user", "content": text})
        counter += n
        return made

    def write(case: str, kind: str, batch: list[dict[str, Any]]) -> None:
        current = Agent.objects.get(pk=agent.pk)  # as a request reads it, with its registry version
        thread_services.key_people_set = one_key if case == "one key" else keep_key_people  # type: ignore[assignment]
        began_cpu, began = time.process_time(), time.perf_counter()
        with transaction.atomic():
            thread_append(agent=current, external_id=threads[case].external_id, entries=batch)
        took = time.perf_counter() - began
        key = (case, kind)
        seconds[key] = seconds.get(key, 0.0) + took
        cpu[key] = cpu.get(key, 0.0) + time.process_time() - began_cpu
        times.setdefault(key, []).append(took)
        entries[key] = entries.get(key, 0) + len(batch)

    try:
        # Warm up: the matcher built, the recognisers loaded (once a process); then the first mention
        # of each person, which makes their data key (a key file written and fsynced, a register row
        # committed on a connection of its own: once a person), timed apart.
        for case in CASES:
            write(case, "warmup", specs(case, 10))
        counter = 0
        write("key sets", "first", specs("key sets", args.people))
        counter = 0
        write("one key", "first", specs("one key", args.people))
        rng = random.Random(7)
        for _ in range(args.rounds):
            order = [(case, kind) for case in CASES for kind in ("batch", "single")]
            rng.shuffle(order)
            for case, kind in order:
                if kind == "batch":
                    write(case, kind, specs(case, args.batch_size))
                else:
                    for _ in range(args.singles):
                        write(case, kind, specs(case, 1))
        thread_services.key_people_set = keep_key_people

        # What each case stored: the key ids its rows name, and that every row opens.
        stored: dict[str, set[str]] = {}
        for case in CASES:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT text FROM memoryapp_entry WHERE thread_id = %s",
                    [Thread.objects.get(pk=threads[case].pk).pk],
                )
                values = [row[0] for row in cursor.fetchall()]
            stored[case] = {sealed_key_id(v) for v in values}
            for v in values:
                text_open(v, aad=value_aad("memoryapp_entry", "text"))
        sets = {k for k in stored["key sets"] if len(key_set_ids(k)) > 1}
        # Deriving a key set (HKDF-SHA256 over three data keys), once per set and process.
        members = [secrets.token_bytes(32) for _ in range(3)]
        began = time.perf_counter()
        for n in range(2000):
            envelope._key_set_derive(f"dka{n}+dkb+dkc", members)
        derive_us = (time.perf_counter() - began) / 2000 * 1e6

        print(
            f"key sets bench: {args.rounds} rounds, batches of {args.batch_size}, {args.singles} singles a round,"
            f" {2 * args.people} people registered; every turn of `one key` and `key sets` names two of them"
        )
        print(
            f"  keys the rows name: one key {len(stored['one key'])}, key sets {len(stored['key sets'])}"
            f" ({len(sets)} sets of three keys), no one {len(stored['no one'])}; every row opens"
        )
        print(f"  deriving a key set: {derive_us:.1f} us (once per set and process, then cached)")
        first = seconds[("key sets", "first")] - seconds[("one key", "first")]
        print(
            f"  first mention of {2 * args.people} people ({args.people} turns, each person's data key made):"
            f" +{first * 1000 / (2 * args.people):.1f} ms a person against the same turns under one key"
        )
        print("  (ratio: entries/s against `one key`; median ratio: its median write time over the case's)")
        for kind in ("batch", "single"):
            base = entries[("one key", kind)] / seconds[("one key", kind)]
            base_median = statistics.median(times[("one key", kind)])
            for case in CASES:
                rate = entries[(case, kind)] / seconds[(case, kind)]
                median = statistics.median(times[(case, kind)])
                print(
                    f"  {kind:<6} {case:<8} {entries[(case, kind)]:>6} entries  {rate:8.1f} entries/s"
                    f"  CPU {cpu[(case, kind)] / entries[(case, kind)] * 1e6:6.0f} us/entry"
                    f"  ratio {rate / base:5.2f}  median ratio {base_median / median:5.2f}"
                )
        one, five, _ = os.getloadavg()
        print(f"  load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs")
    finally:
        thread_services.key_people_set = keep_key_people
        agent_id = agent.pk
        Entry.objects.filter(agent=agent).delete()
        Thread.objects.filter(agent=agent).delete()
        agent.delete()
        DataKey.objects.filter(agent_id=agent_id).delete()
        settings.MEMORY_ENCRYPTION_KEYS = ""
        data_keys_forget()
        keystore.cleanup()


if __name__ == "__main__":
    main()
