"""What screening at write costs the writes: entries/s of batch and single appends with screening
off and on, interleaved in one run, and the ratio (issue 25 §3: on must stay at >= 80% of off).

Uses the database of the Django settings (the embedded PostgreSQL under VAR_DIR unless DATABASE_URL
is set; run `manage.py migrate` first) and the Redis of REDIS_URL. Creates agents of its own,
`bench-screen-*`, and deletes them (threads, entries, audit rows stay in the chain) at the end.

Each write is `thread_append` in this process, committed, the cases taking turns write by write
(bench/appends.py, shared with bench/subjects.py):

- off: every category `allow` (no screener is made: what a write cost before screening);
- off+people: the same, with the 50 people of `all` registered (the subject index notes every turn
  that mentions one of them, screening or not): the baseline of what screening itself costs `all`;
- default: the default policy (secrets refused, card numbers redacted, the rest allowed);
- all: every category `redact`, `person` included, with 50 people registered (3 identifiers each).

The texts are turns of a conversation about a trip, each opened by a word of its own (no two texts
alike), one in twenty with an e-mail address and a phone number in it (so `all` redacts some);
none holds a secret (a refused write stores nothing). Every detector is built before the timing
(`screening_warm_up`, as a web process does when it starts).

The contact is the same in every such turn unless `--distinct-contacts` is given: then each has an
address and a number of its own. A write parses and validates a phone number or checks an address
once however many of its turns hold it (memoryapp.screening.recognizers `Memo.parsed`), so the same
contact repeated in a batch costs it once; `--distinct-contacts` measures the batch that gains
nothing from that.

    python bench/screening.py [--rounds 40] [--batch-size 100] [--distinct-contacts]
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.appends import Interleaved
from memoryapp.models import Agent
from memoryapp.screening.identifiers import identifiers_set
from memoryapp.screening.policy import ACTIONS, DEFAULTS, REDACT, screening_policy_set
from memoryapp.screening.recognizers import screening_warm_up

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


def contact(n: int) -> str:
    """A contact sentence of its own for each n (a valid Italian mobile number, an address)."""
    phone = f"+39 3{20 + n % 60:02d} {n // 60 % 900 + 100:03d} {n % 10000:04d}"
    return f"Send the tickets to {tag(n).lower()}.rossi@example.org or call {phone} if the train is late."


def turn(n: int, *, distinct_contacts: bool = False) -> str:
    if n % 20 != 19:
        return f"{tag(n)}: {SENTENCES[n % len(SENTENCES)]}"
    return f"{tag(n)}: {contact(n) if distinct_contacts else WITH_CONTACT}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40, help="rounds; each makes one write of each kind per case")
    parser.add_argument("--batch-size", type=int, default=100, help="entries of a batch append")
    parser.add_argument("--singles", type=int, default=10, help="single appends per case per round")
    parser.add_argument(
        "--distinct-contacts",
        action="store_true",
        help="give each turn with a contact an e-mail address and a phone number of its own",
    )
    args = parser.parse_args()

    name = uuid.uuid4().hex[:8]
    cases: dict[str, Agent] = {}
    assert set(DEFAULTS.values()) <= set(ACTIONS)
    for case in ("off", "off+people", "default", "all"):
        agent = Agent.objects.create(slug=f"bench-screen-{case}-{name}", name=f"screening bench {case}")
        cases[case] = agent
    screening_policy_set(agent=cases["off"], values=dict.fromkeys(DEFAULTS, "allow"), actor="bench")
    screening_policy_set(agent=cases["off+people"], values=dict.fromkeys(DEFAULTS, "allow"), actor="bench")
    screening_policy_set(agent=cases["all"], values=dict.fromkeys(DEFAULTS, REDACT), actor="bench")
    for case in ("off+people", "all"):
        for n in range(50):
            identifiers_set(
                agent=cases[case],
                user_id=f"p-{n}",
                body={
                    "emails": [f"person{n}@example.net"],
                    "names": [f"Person Number{n}"],
                    "external_ids": [f"cust-{n}"],
                },
                actor="bench",
            )
    bench = Interleaved(cases, thread_id=f"bench-{name}")
    counter = 0

    def specs(n: int) -> list[dict[str, Any]]:
        nonlocal counter
        made = [
            {
                "role": "user" if (counter + i) % 2 else "assistant",
                "content": turn(counter + i, distinct_contacts=args.distinct_contacts),
            }
            for i in range(n)
        ]
        counter += n
        return made

    # Warm up: the first screening builds the recognisers (imports Presidio, spaCy's tokenizer classes:
    # seconds, once a process; a web process builds them as it starts, memoryapp.screening.warm_up).
    screening_warm_up()
    for case in cases:
        bench.write(case, "warmup", specs(5))
    bench.rounds(args.rounds, batch_size=args.batch_size, singles=args.singles, specs=specs)

    contacts = "each its own" if args.distinct_contacts else "the same in each"
    print(
        f"screening bench: {args.rounds} rounds, batches of {args.batch_size}, {args.singles} singles a round,"
        f" contacts {contacts}"
    )
    bench.report(base="off")
    # Registering people costs every write of the agent its subject index (which rows mention whom,
    # issue 25 §2), screening or not (bench/subjects.py measures that apart): against the same agent
    # with screening off, `all` shows what screening itself costs.
    print("  against the same 50 people registered, screening off:")
    bench.report(base="off+people")
    bench.delete()


if __name__ == "__main__":
    main()
