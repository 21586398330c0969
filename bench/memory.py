"""What one `make run` holds in memory: RSS and PSS of web, worker and beat, after real use.

    python bench/memory.py [--agents 4] [--entries 60] [--searches 40] [--per-process]

Starts the service as `make run` does (bench/service.py: its own VAR_DIR and embedded PostgreSQL,
127.0.0.1, a free port; REDIS_URL passed through), waits for /readyz, then uses it so that every
process loads what it would load in service: `--agents` agents each append `--entries` turns
(the embedding jobs run on the worker) and hybrid searches are sent over 6 connections at once
(every web process embeds queries), until vector search finds every turn. Then it prints, per
role, the number of processes and the sums of their RSS and PSS (/proc/PID/smaps_rollup): RSS
counts a page shared by several processes once in each of them, PSS divides it between them,
so the sum of PSS is what the service takes from the machine. The embedded PostgreSQL and Redis
are not counted (they are not the launcher's children). Then it stops the service.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.service import Client, RoleMemory, Service, cmdline, memory_kb, roles_memory, subtree

TURNS = (
    "We planned the garden: tomatoes along the fence, basil in pots, compost by the shed.",
    "My knee hurts after the long run, so the marathon training is on hold for two weeks.",
    "The mortgage rate goes up in March; we should look at the savings account first.",
    "Book the flight to Lisbon for the ninth and a hotel near the river, not the airport.",
    "The vet said the puppy needs a lighter leash and no treats before the walk.",
    "Yes, last May!",
)
QUERIES = (
    "what did the vet say about the puppy",
    "when is the flight to Lisbon",
    "how is the knee after running",
    "what about the mortgage rate",
)


def use(service: Service, *, agents: int, entries: int, searches: int) -> None:
    keys = [service.agent_key(f"bench-mem-{uuid.uuid4().hex[:8]}") for _ in range(agents)]
    threads = []
    for key in keys:
        client = Client(service.port, key)
        thread_id = f"mem-{uuid.uuid4().hex[:8]}"
        status, body = client.call("POST", "/api/v1/threads", {"id": thread_id})
        assert status in (200, 201), (status, body)
        turns = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"{TURNS[i % len(TURNS)]} ({i})"}
            for i in range(entries)
        ]
        for offset in range(0, entries, 20):
            status, body = client.call(
                "POST", f"/api/v1/threads/{thread_id}/entries", {"entries": turns[offset : offset + 20]}
            )
            assert status in (200, 201), (status, body)
        threads.append((key, thread_id))
        client.close()

    def search(i: int) -> int:
        key = threads[i % len(threads)][0]
        client = Client(service.port, key)
        try:
            status, _ = client.call(
                "POST", "/api/v1/search", {"text": QUERIES[i % len(QUERIES)], "method": "hybrid", "limit": 5}
            )
            return status
        finally:
            client.close()

    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(search, range(searches)))
    assert all(s == 200 for s in statuses), statuses

    # Every turn embedded: vector search within each thread finds all of them.
    deadline = time.monotonic() + 900
    for key, thread_id in threads:
        client = Client(service.port, key)
        while True:
            status, body = client.call(
                "POST",
                "/api/v1/search",
                {"text": "garden", "method": "vector", "thread_id": thread_id, "limit": 100, "kinds": ["entries"]},
            )
            if status == 200 and len(body["results"]) >= entries:
                break
            if time.monotonic() > deadline:
                sys.exit(f"the turns of {thread_id} were not embedded in 900 s")
            time.sleep(1)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--entries", type=int, default=60, help="turns per agent (at most 100)")
    parser.add_argument("--searches", type=int, default=40)
    parser.add_argument("--per-process", action="store_true", help="also one line per process")
    args = parser.parse_args()

    service = Service()
    try:
        service.start()
        ready = service.wait_ready()
        print(f"/readyz answered 200 after {ready:.1f} s")
        assert service.process is not None
        at_ready = roles_memory(service.process.pid)
        print("at /readyz:")
        report(at_ready)
        started = time.monotonic()
        use(service, agents=args.agents, entries=min(args.entries, 100), searches=args.searches)
        time.sleep(2)
        print(
            f"after use ({args.agents} agents x {min(args.entries, 100)} turns embedded, {args.searches} hybrid"
            f" searches; {time.monotonic() - started:.0f} s):"
        )
        report(roles_memory(service.process.pid))
        if args.per_process:
            for pid in subtree(service.process.pid):
                rss, pss = memory_kb(pid)
                print(f"    pid {pid:>7}  RSS {rss / 1024:6.0f} MB  PSS {pss / 1024:6.0f} MB  {cmdline(pid)[:90]}")
    finally:
        service.stop()
        service.remove()


def report(roles: dict[str, RoleMemory]) -> None:
    total = RoleMemory("total (web, worker, beat)")
    for name in ("web", "worker", "beat", "other"):
        if name not in roles:
            continue
        role = roles[name]
        print(role.line())
        total.processes += role.processes
        total.rss_kb += role.rss_kb
        total.pss_kb += role.pss_kb
    print(total.line())
    print(roles["launcher"].line() + "   (the launcher: not counted above)")


if __name__ == "__main__":
    main()
