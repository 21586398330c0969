"""Change events through Server-Sent Events, and what recording them costs an append.

Against the running service (`make run`), as one agent (`--key`):

0. baseline: single appends from one client, no stream open (`--appends` of them): p50 / p95;
1. the same appends with an SSE reader attached to GET /api/v1/events: p50 / p95, and how long
   each event took from the append's answer to the reader (p50 / p95);
2. `--writers` clients (8) appending to threads of their own, `--per-writer` entries each, one
   request at a time, without a reader: entries/s (the commit-order lock of the agent's counter
   makes one agent's commits queue for the length of a commit: this is what it costs);
3. the same with the reader attached: entries/s written and events/s through SSE (events received
   over the time from the first append to the last event read), and whether the reader got every
   event once and in order (it reconnects with Last-Event-ID whenever the service closes a stream).

Every thread it makes is deleted at the end (their events stay, as retention keeps them).

    python bench/events.py --base http://127.0.0.1:8000 --key mk_... [--writers 8] [--per-writer 100]

The key's rate limit (API_RATE_PER_MINUTE, 600 a minute by default) would answer many of these
requests 429: set the bench agent's `rate_limit_per_minute` to 0 on its admin page (or start the
service with API_RATE_PER_MINUTE=0) before a run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


class Client:
    """One keep-alive HTTP connection to the service."""

    def __init__(self, base: str, key: str):
        parts = urlsplit(base)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.connection: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(2):
            if self.connection is None:
                self.connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
            try:
                self.connection.request(method, path, body=data, headers=self.headers)
                response = self.connection.getresponse()
                raw = response.read()
                return response.status, (json.loads(raw) if raw else None)
            except (http.client.HTTPException, OSError):
                self.connection.close()
                self.connection = None
                if attempt:
                    raise
        raise RuntimeError("unreachable")


@dataclass
class Reader:
    """Reads the SSE stream in a thread of its own, reconnecting with Last-Event-ID, and notes when
    each event arrived."""

    base: str
    key: str
    after: int
    arrived: dict[int, float] = field(default_factory=dict)
    duplicates: int = 0
    out_of_order: int = 0
    connections: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        parts = urlsplit(self.base)
        last = self.after
        while not self.stop.is_set():
            conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=60)
            headers = {"Authorization": f"Bearer {self.key}", "Accept": "text/event-stream", "Last-Event-ID": str(last)}
            try:
                conn.request("GET", "/api/v1/events", headers=headers)
                response = conn.getresponse()
                self.connections += 1
                if response.status != 200:
                    time.sleep(0.5)
                    continue
                event_id: int | None = None
                while not self.stop.is_set():
                    line = response.readline()
                    if not line:
                        break
                    text = line.decode().rstrip("\r\n")
                    if text.startswith("id: "):
                        event_id = int(text[4:])
                    elif text == "" and event_id is not None:
                        if event_id in self.arrived:
                            self.duplicates += 1
                        elif event_id != last + 1 and event_id > last:
                            self.out_of_order += 1
                        self.arrived.setdefault(event_id, time.perf_counter())
                        last = max(last, event_id)
                        event_id = None
            except OSError:
                time.sleep(0.2)
            finally:
                conn.close()

    def wait_for(self, seq: int, timeout: float = 120) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if seq in self.arrived:
                return True
            time.sleep(0.01)
        return False

    def close(self) -> None:
        self.stop.set()


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def last_seq(client: Client) -> int:
    status, body = client.call("GET", "/api/v1/events/page?limit=1")
    assert status == 200, body
    return int(body["last_seq"])


def single_appends(client: Client, thread: str, count: int) -> tuple[list[float], list[float]]:
    """(latencies, when each append answered) of `count` single appends, one after another."""
    latencies: list[float] = []
    answered: list[float] = []
    for n in range(count):
        started = time.perf_counter()
        status, body = client.call(
            "POST", f"/api/v1/threads/{thread}/entries", {"role": "user", "content": f"turn {n}"}
        )
        done = time.perf_counter()
        assert status == 201, body
        latencies.append(done - started)
        answered.append(done)
    return latencies, answered


def writers_phase(base: str, key: str, threads: list[str], per_writer: int) -> tuple[int, float, float]:
    """(entries written, seconds, when the first append started)."""
    barrier = threading.Barrier(len(threads) + 1)
    errors: list[BaseException] = []

    def write(thread: str) -> None:
        client = Client(base, key)
        barrier.wait()
        try:
            for n in range(per_writer):
                status, body = client.call(
                    "POST", f"/api/v1/threads/{thread}/entries", {"role": "user", "content": f"w {n}"}
                )
                assert status == 201, body
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=write, args=(t,)) for t in threads]
    for w in workers:
        w.start()
    barrier.wait()
    started = time.perf_counter()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return len(threads) * per_writer, time.perf_counter() - started, started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True)
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--per-writer", type=int, default=100)
    options = parser.parse_args()
    client = Client(options.base, options.key)
    run = uuid.uuid4().hex[:8]
    solo = f"bench-ev-{run}-solo"
    writer_threads = [f"bench-ev-{run}-w{n}" for n in range(options.writers)]
    for thread in [solo, *writer_threads]:
        status, body = client.call("POST", "/api/v1/threads", {"id": thread})
        assert status in (200, 201), body
    try:
        client.call("POST", f"/api/v1/threads/{solo}/entries", {"role": "user", "content": "warm up"})

        base_lat, _ = single_appends(client, solo, options.appends)
        print(
            f"0. single appends, no stream open     {options.appends:>5}   p50 {pct(base_lat, 50) * 1000:7.2f} ms"
            f"   p95 {pct(base_lat, 95) * 1000:7.2f} ms"
        )

        start = last_seq(client)
        reader = Reader(options.base, options.key, after=start)
        reader.start()
        time.sleep(0.5)
        reader_lat, answered = single_appends(client, solo, options.appends)
        reader.wait_for(start + options.appends)
        # The appends go one after another: the n-th answered is the event start + n + 1.
        delays = [
            reader.arrived[start + n + 1] - at for n, at in enumerate(answered) if start + n + 1 in reader.arrived
        ]
        print(
            f"1. single appends, SSE reader attached {options.appends:>4}   p50 {pct(reader_lat, 50) * 1000:7.2f} ms"
            f"   p95 {pct(reader_lat, 95) * 1000:7.2f} ms   append -> reader p50 {pct(delays, 50) * 1000:.0f} ms"
            f" p95 {pct(delays, 95) * 1000:.0f} ms"
        )
        reader.close()

        written, seconds, _ = writers_phase(options.base, options.key, writer_threads, options.per_writer)
        print(
            f"2. {options.writers} writers, no stream open          {written:>5} entries in {seconds:6.2f}s = {written / seconds:8.1f} entries/s"
        )

        start = last_seq(client)
        reader = Reader(options.base, options.key, after=start)
        reader.start()
        time.sleep(0.5)
        written, seconds, first = writers_phase(options.base, options.key, writer_threads, options.per_writer)
        complete = reader.wait_for(start + written)
        reader.close()
        got = [s for s in reader.arrived if start < s <= start + written]
        through = (max(reader.arrived[s] for s in got) - first) if got else float("nan")
        print(
            f"3. {options.writers} writers, SSE reader attached    {written:>5} entries in {seconds:6.2f}s = {written / seconds:8.1f} entries/s;"
            f" reader got {len(got)} events in {through:6.2f}s = {len(got) / through:8.1f} events/s"
            f" ({'every event' if complete and len(got) == written else 'MISSING events'}, once: {reader.duplicates == 0},"
            f" in order: {reader.out_of_order == 0}, {reader.connections} connection(s))"
        )
        print(f"   append p50 with a reader / without: {pct(reader_lat, 50) / pct(base_lat, 50):.2f}x")
    finally:
        for thread in [solo, *writer_threads]:
            client.call("DELETE", f"/api/v1/threads/{thread}")


if __name__ == "__main__":
    main()
