"""The first requests after a restart: how long after /readyz answers 200 they take.

    python bench/cold_start.py [--connections 6] [--turns 40]

1. Starts the service as `make run` does (bench/service.py: its own VAR_DIR, 127.0.0.1, a free
   port), makes an agent and a thread of `--turns` turns, waits until they are embedded, stops it.
2. Starts it again on the same data and polls /readyz every 0.1 s as a load balancer would.
3. The moment /readyz answers 200, sends the first request of each kind alone, one after the
   other (hybrid search, hybrid context build of 4,000 tokens, single append, path read); then
   the first wave: `--connections` new connections for each kind at once, so every web process
   and thread meets its first request; then a second wave the same way.
Prints the seconds to /readyz, each kind's first request alone, and per kind the slowest and
the median request of each wave: the first wave is what clients meet right after a restart, the
second what they meet later (the same concurrency, so the difference is what a start costs).
It never asserts a duration; it stops what it started.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.service import Client, Service

TURNS = (
    "We planned the garden: tomatoes along the fence, basil in pots, compost by the shed.",
    "My knee hurts after the long run, so the marathon training is on hold for two weeks.",
    "The mortgage rate goes up in March; we should look at the savings account first.",
    "Book the flight to Lisbon for the ninth and a hotel near the river, not the airport.",
    "The vet said the puppy needs a lighter leash and no treats before the walk.",
)
KINDS = ("search", "context", "append", "path")


def prepare(service: Service, turns: int) -> tuple[str, str]:
    key = service.agent_key(f"bench-cold-{uuid.uuid4().hex[:8]}")
    client = Client(service.port, key)
    thread_id = f"cold-{uuid.uuid4().hex[:8]}"
    status, body = client.call("POST", "/api/v1/threads", {"id": thread_id})
    assert status in (200, 201), (status, body)
    entries = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{TURNS[i % len(TURNS)]} ({i})"}
        for i in range(turns)
    ]
    status, body = client.call("POST", f"/api/v1/threads/{thread_id}/entries", {"entries": entries})
    assert status in (200, 201), (status, body)
    deadline = time.monotonic() + 900
    while True:
        status, body = client.call(
            "POST", "/api/v1/search", {"text": "garden", "method": "vector", "thread_id": thread_id, "limit": 100}
        )
        if status == 200 and len(body["results"]) >= turns:
            break
        if time.monotonic() > deadline:
            sys.exit("the turns were not embedded in 900 s")
        time.sleep(1)
    client.close()
    return key, thread_id


def request(port: int, key: str, thread_id: str, kind: str, n: int) -> tuple[str, float, int]:
    client = Client(port, key)  # a new connection: it may meet any web process and thread
    began = time.perf_counter()
    try:
        if kind == "search":
            status, _ = client.call("POST", "/api/v1/search", {"text": "how is the knee after the run", "limit": 10})
        elif kind == "context":
            status, _ = client.call(
                "POST",
                f"/api/v1/threads/{thread_id}/context",
                {"max_tokens": 4000, "strategy": "hybrid", "current_input": "when is the flight to Lisbon"},
            )
        elif kind == "append":
            status, _ = client.call(
                "POST", f"/api/v1/threads/{thread_id}/entries", {"role": "user", "content": f"one more turn {n}"}
            )
        else:
            status, _ = client.call("GET", f"/api/v1/threads/{thread_id}/path?limit=50")
    finally:
        client.close()
    return kind, time.perf_counter() - began, status


def wave(port: int, key: str, thread_id: str, connections: int) -> dict[str, list[float]]:
    jobs = [(kind, n) for n in range(connections) for kind in KINDS]
    with ThreadPoolExecutor(len(jobs)) as pool:
        done = list(pool.map(lambda job: request(port, key, thread_id, *job), jobs))
    bad = [(kind, status) for kind, _, status in done if status not in (200, 201)]
    if bad:
        print(f"  errors: {bad}")
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for kind, seconds, _ in done:
        times[kind].append(seconds)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=6, help="connections per kind in each wave")
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()

    service = Service()
    try:
        service.start()
        print(f"first start: /readyz 200 after {service.wait_ready():.1f} s")
        key, thread_id = prepare(service, args.turns)
        service.stop()
        service.start()
        ready = service.wait_ready()
        alone = {kind: request(service.port, key, thread_id, kind, -1) for kind in KINDS}
        first = wave(service.port, key, thread_id, args.connections)
        second = wave(service.port, key, thread_id, args.connections)
        print(f"restart: /readyz 200 after {ready:.1f} s; then the first request of each kind, alone:")
        print("  " + "   ".join(f"{kind} {seconds:5.2f} s (HTTP {status})" for kind, seconds, status in alone.values()))
        print(f"then {args.connections} new connections per kind at once, twice:")
        for kind in KINDS:
            print(
                f"  {kind:<8} first wave: slowest {max(first[kind]):6.2f} s  median {statistics.median(first[kind]):6.2f} s"
                f"   second wave: slowest {max(second[kind]):6.2f} s  median {statistics.median(second[kind]):6.2f} s"
            )
    finally:
        service.stop()
        service.remove()


if __name__ == "__main__":
    main()
