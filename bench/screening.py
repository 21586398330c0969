"""What screening at write costs the writes: entries/s of batch and single appends with screening
off and on, interleaved in one run, and the ratio (issue 25 §3: on must stay at >= 80% of off).

Uses the database of the Django settings (the embedded PostgreSQL under VAR_DIR unless DATABASE_URL
is set; run `manage.py migrate` first) and the Redis of REDIS_URL. Creates agents of its own,
`bench-screen-*`, and deletes them (threads, entries, audit rows stay in the chain) at the end.

Each write is `thread_append` in this process, committed, with its after-commit hooks run as a
web request runs them (embedding and extraction left out: a worker's, the same for every case).
The cases take turns write by write, in a new random order each round, so drift of the machine
hits them alike:

- off: every category `allow` (no screener is made: what a write cost before screening);
- default: the default policy (secrets refused, card numbers redacted, the rest allowed);
- all: every category `redact`, `person` included, with 50 people registered (3 identifiers each).

The texts are turns of a conversation about a trip, each opened by a word of its own (no two texts
alike), one in twenty with an e-mail address and a phone number in it (so `all` redacts some);
none holds a secret (a refused write stores nothing). Every detector is built before the timing
(`screening_warm_up`, as a web process does when it starts).

    python bench/screening.py [--rounds 40] [--batch-size 100]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
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

from django.db import transaction  # noqa: E402

from memoryapp.models import Agent, Thread  # noqa: E402
from memoryapp.screening.identifiers import identifiers_set  # noqa: E402
from memoryapp.screening.policy import ACTIONS, DEFAULTS, REDACT, screening_policy_set  # noqa: E402
from memoryapp.screening.recognizers import screening_warm_up  # noqa: E402
from memoryapp.threads import hooks  # noqa: E402
from memoryapp.threads.services import thread_append, thread_create  # noqa: E402

SENTENCES = (
    "Could you plan a day in Rome for us, starting early and avoiding the big queues?",
    "Start at the Colosseum at eight, then walk over the Palatine Hill to the Forum.",
    "We are vegetarian, and my daughter does not like long walks in the afternoon heat.",
    "Then lunch near Campo de' Fiori, a siesta, and the Pantheon after five o'clock.",
    "Book the table for four people at half past seven, near the Trastevere bridge.",
)
WITH_CONTACT = "Send the tickets to marta.rossi@example.org or call +39 312 345 6789 if the train is late."


def tag(n: int) -> str:
    """A word of letters only, other for each n: every turn is a text of its own (a screener works
    per write; texts repeated within a batch would flatter it), and adds no digit to the turn."""
    letters = ""
    while True:
        n, rest = divmod(n, 26)
        letters += "abcdefghijklmnopqrstuvwxyz"[rest]
        if not n:
            return letters.capitalize()


def turn(n: int) -> str:
    text = WITH_CONTACT if n % 20 == 19 else SENTENCES[n % len(SENTENCES)]
    return f"{tag(n)}: {text}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40, help="rounds; each makes one write of each kind per case")
    parser.add_argument("--batch-size", type=int, default=100, help="entries of a batch append")
    parser.add_argument("--singles", type=int, default=10, help="single appends per case per round")
    args = parser.parse_args()

    for name in ("embedding", "extraction"):
        hooks._followers.pop(name, None)
    tag = uuid.uuid4().hex[:8]
    cases: dict[str, Agent] = {}
    assert set(DEFAULTS.values()) <= set(ACTIONS)
    for case in ("off", "default", "all"):
        agent = Agent.objects.create(slug=f"bench-screen-{case}-{tag}", name=f"screening bench {case}")
        cases[case] = agent
    screening_policy_set(agent=cases["off"], values=dict.fromkeys(DEFAULTS, "allow"), actor="bench")
    screening_policy_set(agent=cases["all"], values=dict.fromkeys(DEFAULTS, REDACT), actor="bench")
    for n in range(50):
        identifiers_set(
            agent=cases["all"],
            user_id=f"p-{n}",
            body={"emails": [f"person{n}@example.net"], "names": [f"Person Number{n}"], "external_ids": [f"cust-{n}"]},
            actor="bench",
        )
    threads = {case: thread_create(agent=agent, external_id=f"bench-{tag}") for case, agent in cases.items()}

    seconds: dict[tuple[str, str], float] = {}
    entries: dict[tuple[str, str], int] = {}
    times: dict[tuple[str, str], list[float]] = {}
    counter = 0

    def write(case: str, kind: str, specs: list[dict[str, Any]]) -> None:
        agent = cases[case]
        start = time.perf_counter()
        with transaction.atomic():
            thread_append(agent=agent, external_id=threads[case].external_id, entries=specs)
        key = (case, kind)
        took = time.perf_counter() - start
        seconds[key] = seconds.get(key, 0.0) + took
        times.setdefault(key, []).append(took)
        entries[key] = entries.get(key, 0) + len(specs)

    def specs(n: int) -> list[dict[str, Any]]:
        nonlocal counter
        made = [{"role": "user" if (counter + i) % 2 else "assistant", "content": turn(counter + i)} for i in range(n)]
        counter += n
        return made

    # Warm up: the first screening builds the recognisers (imports Presidio, spaCy's tokenizer classes:
    # seconds, once a process; a web process builds them as it starts, memoryapp.screening.warm_up).
    screening_warm_up()
    for case in cases:
        write(case, "warmup", specs(5))
    rng = random.Random(7)
    for _ in range(args.rounds):
        order = [(case, kind) for case in cases for kind in ("batch", "single")]
        rng.shuffle(order)
        for case, kind in order:
            if kind == "batch":
                write(case, kind, specs(args.batch_size))
            else:
                for _ in range(args.singles):
                    write(case, kind, specs(1))

    print(f"screening bench: {args.rounds} rounds, batches of {args.batch_size}, {args.singles} singles a round")
    print("  (ratio: entries/s against off; median ratio: off's median write time over the case's, which")
    print("   a burst of another process's work moves less)")
    for kind in ("batch", "single"):
        off = entries[("off", kind)] / seconds[("off", kind)]
        off_median = statistics.median(times[("off", kind)])
        for case in cases:
            rate = entries[(case, kind)] / seconds[(case, kind)]
            median = statistics.median(times[(case, kind)])
            print(
                f"  {kind:<6} {case:<8} {entries[(case, kind)]:>7} entries  {rate:9.1f} entries/s"
                f"  ratio {rate / off:5.2f}  median ratio {off_median / median:5.2f}"
            )

    for agent in cases.values():
        Thread.objects.filter(agent=agent).delete()
        agent.delete()


if __name__ == "__main__":
    main()
