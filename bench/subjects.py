"""What finding registered people at write costs the writes (issue 25 §2): entries/s of batch and
single appends by an agent without registered people and by one with many, interleaved in one run,
and the ratio.

Uses the database of the Django settings (the embedded PostgreSQL under VAR_DIR unless DATABASE_URL
is set; run `manage.py migrate` first) and the Redis of REDIS_URL. Creates agents of its own,
`bench-subjects-*`, and deletes them at the end.

Each write is `thread_append` in this process, committed, the cases taking turns write by write
(bench/appends.py, shared with bench/screening.py). Screening is off for both agents (every
category `allow`), so the only difference is the write-time mention detector
(memoryapp.subjects.detect):

- none: nobody registered (`people_version` 0: what a write cost before the detector);
- people: `--people` people registered, each with an e-mail, a phone, a name and an external id.
- people-nolock (with `--erasure-lock`): the same people, the writes run without what a write
  naming a registered person does against an erasure of them (memoryapp.subjects.erasing: the
  person's erasure lock taken shared and their mark read, two statements): its cost is `people`
  against `people-nolock`.

The texts are turns of a conversation about a trip, one in twenty naming one of the registered
people by name and e-mail (so `people` records mentions: one index row per such turn).

    python bench/subjects.py [--rounds 30] [--batch-size 100] [--people 500] [--erasure-lock]
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.appends import Interleaved
from memoryapp.models import Agent, SubjectMention
from memoryapp.screening.identifiers import identifiers_set
from memoryapp.screening.policy import DEFAULTS, screening_policy_set
from memoryapp.subjects import detect

SENTENCES = (
    "Could you plan a day in Rome for us, starting early and avoiding the big queues?",
    "Start at the Colosseum at eight, then walk over the Palatine Hill to the Forum.",
    "We are vegetarian, and my daughter does not like long walks in the afternoon heat.",
    "Then lunch near Campo de' Fiori, a siesta, and the Pantheon after five o'clock, 06:30 to 19:45.",
    "Book the table for four people at half past seven, near the Trastevere bridge.",
)


def naming(n: int) -> str:
    return f"Ask Marta Rossi{n} (marta.rossi{n}@example.org) whether the train on platform 12 is late."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30, help="rounds; each makes one write of each kind per case")
    parser.add_argument("--batch-size", type=int, default=100, help="entries of a batch append")
    parser.add_argument("--singles", type=int, default=10, help="single appends per case per round")
    parser.add_argument("--people", type=int, default=500, help="people registered for the `people` agent")
    parser.add_argument(
        "--erasure-lock", action="store_true", help="add the case people-nolock: the writes without the erasure's lock"
    )
    args = parser.parse_args()

    name = uuid.uuid4().hex[:8]
    cases: dict[str, Agent] = {}
    names = ("none", "people", "people-nolock") if args.erasure_lock else ("none", "people")
    for case in names:
        agent = Agent.objects.create(slug=f"bench-subjects-{case}-{name}", name=f"subjects bench {case}")
        screening_policy_set(agent=agent, values=dict.fromkeys(DEFAULTS, "allow"), actor="bench")
        cases[case] = agent
    for n, case in ((n, case) for case in names if case != "none" for n in range(args.people)):
        identifiers_set(
            agent=cases[case],
            user_id=f"p-{n}",
            body={
                "emails": [f"marta.rossi{n}@example.org"],
                "phones": [f"+39 312 {n:03d} {n:04d}"[:16]],
                "names": [f"Marta Rossi{n}"],
                "external_ids": [f"cust-{n}"],
            },
            actor="bench",
        )
    bench = Interleaved(cases, thread_id=f"bench-{name}", reread=True)
    if args.erasure_lock:
        write = bench.write

        def write_without_lock(case: str, kind: str, specs: list[dict[str, Any]]) -> None:
            if case != "people-nolock":
                write(case, kind, specs)
                return
            with_lock = detect._erasing_redact
            detect._erasing_redact = lambda **_: None  # type: ignore[assignment]
            try:
                write(case, kind, specs)
            finally:
                detect._erasing_redact = with_lock

        bench.write = write_without_lock  # type: ignore[method-assign]
    counter = 0

    def specs(n: int) -> list[dict[str, Any]]:
        nonlocal counter
        made = []
        for i in range(n):
            at = counter + i
            text = naming(at % args.people) if at % 20 == 19 else SENTENCES[at % len(SENTENCES)]
            made.append({"role": "user" if at % 2 else "assistant", "content": text})
        counter += n
        return made

    # Warm up: the first write of `people` builds its matcher (every identifier read and opened once),
    # and the first turn naming someone loads the e-mail and phone recognisers (once a process).
    for case in cases:
        counter = 0
        bench.write(case, "warmup", specs(20))
    built = bench.seconds[("people", "warmup")] - bench.seconds[("none", "warmup")]
    bench.rounds(args.rounds, batch_size=args.batch_size, singles=args.singles, specs=specs)

    recorded = SubjectMention.objects.filter(agent=cases["people"]).count()
    print(
        f"subjects bench: {args.rounds} rounds, batches of {args.batch_size}, {args.singles} singles a round,"
        f" {args.people} people registered ({4 * args.people} identifiers)"
    )
    print(
        f"  first write (matcher built, recognisers loaded, once a process): +{built * 1000:.0f} ms;"
        f" mentions recorded: {recorded}"
    )
    bench.report(base="none")
    bench.delete()


if __name__ == "__main__":
    main()
