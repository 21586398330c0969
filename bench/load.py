"""Mixed load against a running service, with the web processes' CPU per request of each kind.

    python bench/load.py --base http://127.0.0.1:8000 [--clients 50] [--duration 60]
        [--mix append=50,search=20,context=15,path=15] [--agents 10] [--fresh-queries]

1. Agents: `--agents` agents are created through the service's own command
   (`manage.py agent_create`, one run of it, in this checkout with this environment, so against the service's
   database), each with a heavy-request cap of its share of the clients, so the bench meets no
   limit it did not ask for. `--keys FILE` (one key a line) uses existing agents instead.
2. Threads: one per client, under agent `client % agents`, seeded with `--seed-entries` turns
   by batch appends (so path reads and context builds have a history); then, at most
   `--settle-seconds`, the bench waits for the worker to embed them (its CPU flat for two seconds),
   so that the phases' worker CPU is the requests' own.
3. A `/healthz` phase: the web processes' CPU per request of the cheapest answer, the baseline.
4. One phase per kind (`--kind-clients` clients, `--kind-seconds` each): the web CPU per request
   of that kind alone, read from /proc/<pid>/stat of the gunicorn master and its workers before and
   after; next to it the CPU per request of the service's other processes in the same phase: its
   Celery worker and beat (the launcher's other children: the embedding of every appended turn,
   counted until the worker is done with the phase's turns, not only while the phase runs: a
   worker at nice 10 embeds a burst's turns after it) and its PostgreSQL (the postmaster of
   `--pgdata` and its backends), where they run here.
5. The mixed phase: `--clients` clients for `--duration` seconds, each picking its next request by
   the mix: a single append to its own thread, a hybrid search, a hybrid context build of 4,000
   tokens on its thread, or a path read of its thread's newest 50 turns. Prints req/s,
   p50/p95/p99 per kind, errors by status, and the web CPU per request of the whole mix.
   The questions are five fixed ones, whose vectors each web process caches after their first
   embedding; `--fresh-queries` makes every search's and context build's question a new one
   (a place and a number added), so each embeds its query in the web process as a user's would.
6. The bench threads are deleted (`--keep` keeps them); the agents stay (slugs `load-<run>-N`).

`--cold` instead starts the service itself (`python -m memory_project.launcher` in this checkout,
on the port of --base, which must be free), times how long /healthz and /readyz take to answer,
then runs the mixed load at once and prints the first requests' latencies (first request of each
kind, and p50/p95/p99 of the first `--duration` seconds), then stops the service.

Bounded: every phase ends by its time or by `--max-requests`; only loopback addresses are
accepted as --base. It never asserts a duration.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.write_entries import CLOCK_TICKS, SENTENCES, Client, cpu_seconds, web_processes  # noqa: E402
from bench.write_entries import proc_stat as _stat  # noqa: E402

QUERIES = (
    "Which museum did we plan for the morning?",
    "What do we eat for lunch near the square?",
    "How long are the walks in the afternoon heat?",
    "When should we see the Pantheon?",
    "Did anyone mention queues at the Colosseum?",
)
# Places a query can be about, so that `--fresh-queries` asks texts no process has embedded yet.
PLACES = ("the Forum", "Trastevere", "the Vatican", "the station", "the hotel", "the river", "the market")
KINDS = ("append", "search", "context", "path")
# --fresh-queries: each search and context build asks a question of its own (a query's vector is
# cached per web process, so the five QUERIES are embedded once each and then never again).
FRESH_QUERIES = False


def query_text(rng: random.Random) -> str:
    if not FRESH_QUERIES:
        return rng.choice(QUERIES)
    return f"{rng.choice(QUERIES)[:-1]} near {rng.choice(PLACES)}, day {rng.randrange(1_000_000)}?"


DEFAULT_MIX = "append=50,search=20,context=15,path=15"


# --- where the service may be -------------------------------------------------------------------


def loopback_only(base: str) -> tuple[str, int]:
    parts = urlsplit(base)
    host = parts.hostname or ""
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError as exc:
        sys.exit(f"--base {base}: cannot resolve {host!r} ({exc})")
    if not addresses or not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        sys.exit(f"--base {base}: this bench sends load to loopback addresses only (127.0.0.0/8, ::1)")
    return host, parts.port or 80


# --- the web processes' CPU ------------------------------------------------------------------------


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _children(pids: set[int]) -> set[int]:
    """These processes and all their descendants."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(stat[1])
    found, grew = set(pids), True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def worker_processes(web: list[int]) -> list[int]:
    """The launcher's other children (Celery worker, beat) and theirs: the launcher is the parent of
    the gunicorn master (the web process whose parent is not one of them)."""
    parents = {pid: int(stat[1]) for pid in web if (stat := _stat(pid)) is not None}
    masters = [parent for pid, parent in parents.items() if parent not in parents]
    if len(set(masters)) != 1:
        return []
    launcher = masters[0]
    if launcher <= 1 or not any("memory_project.launcher" in part for part in _cmdline(launcher)):
        return []
    return sorted(_children({launcher}) - {launcher} - _children(set(web)))


def postgres_postmaster(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def postgres_cpu_seconds(postmaster: int | None) -> float:
    """The postmaster's CPU with that of its children it reaped (fields 16 and 17: backends that
    ended), and that of its live children: a backend that ends within a phase is still counted."""
    if postmaster is None or (stat := _stat(postmaster)) is None:
        return 0.0
    total = sum(int(v) for v in stat[11:15])
    return total / CLOCK_TICKS + cpu_seconds(sorted(_children({postmaster}) - {postmaster}))


# --- requests ----------------------------------------------------------------------------------------


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    firsts: dict[str, float] = field(default_factory=dict)

    def add(self, kind: str, seconds: float, status: int) -> None:
        self.latencies.setdefault(kind, []).append(seconds)
        self.firsts.setdefault(kind, seconds)
        if not 200 <= status < 300:
            self.errors[f"{kind} {status}"] += 1

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.latencies.values())


def percentile(values: list[float], p: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


@dataclass
class Seat:
    """One client: its connection, its agent's key and its own thread."""

    client: Client
    thread_id: str
    turn: int = 0


def do_request(kind: str, seat: Seat, rng: random.Random) -> int:
    client = seat.client
    if kind == "append":
        seat.turn += 1
        body: dict[str, object] = {"role": "user" if seat.turn % 2 else "assistant", "content": rng.choice(SENTENCES)}
        status, _ = client.call("POST", f"/api/v1/threads/{seat.thread_id}/entries", body)
    elif kind == "search":
        status, _ = client.call("POST", "/api/v1/search", {"text": query_text(rng), "method": "hybrid"})
    elif kind == "context":
        body = {"strategy": "hybrid", "max_tokens": 4000, "current_input": query_text(rng)}
        status, _ = client.call("POST", f"/api/v1/threads/{seat.thread_id}/context", body)
    elif kind == "path":
        status, _ = client.call("GET", f"/api/v1/threads/{seat.thread_id}/path?limit=50")
    elif kind == "healthz":
        status, _ = client.call("GET", "/healthz")
    else:
        raise ValueError(kind)
    return status


def run_phase(
    seats: list[Seat], pick: Callable[[random.Random], str], *, seconds: float, max_requests: int, pids: list[int]
) -> tuple[Tally, float, float]:
    """Every seat sends requests chosen by `pick` until `seconds` pass or `max_requests` were sent:
    (tally, wall seconds, web CPU seconds)."""
    tally, lock = Tally(), threading.Lock()
    sent = [0]
    start = threading.Barrier(len(seats) + 1)
    deadline = [0.0]

    def worker(number: int) -> None:
        rng = random.Random(number)
        seat = seats[number]
        start.wait()
        while time.monotonic() < deadline[0]:
            with lock:
                if sent[0] >= max_requests:
                    return
                sent[0] += 1
            kind = pick(rng)
            began = time.perf_counter()
            try:
                status = do_request(kind, seat, rng)
            except Exception:  # a refused or reset connection is an error of the run, not a crash of it
                status = 0
            elapsed = time.perf_counter() - began
            with lock:
                tally.add(kind, elapsed, status)

    with ThreadPoolExecutor(len(seats)) as pool:
        futures = [pool.submit(worker, n) for n in range(len(seats))]
        cpu_before = cpu_seconds(pids)
        deadline[0] = time.monotonic() + seconds
        began = time.perf_counter()
        start.wait()
        for future in futures:
            future.result()
        wall = time.perf_counter() - began
    return tally, wall, cpu_seconds(pids) - cpu_before


def _always(kind: str) -> Callable[[random.Random], str]:
    return lambda rng: kind


def kind_line(kind: str, values: list[float], wall: float) -> str:
    return (
        f"  {kind:<8} {len(values):>6} req {len(values) / wall:7.1f}/s   p50 {percentile(values, 50) * 1000:8.1f} ms"
        f"  p95 {percentile(values, 95) * 1000:8.1f} ms  p99 {percentile(values, 99) * 1000:8.1f} ms"
    )


# --- setup -------------------------------------------------------------------------------------------


def create_agents(count: int, run: str, heavy: int) -> list[str]:
    """`count` agents made by the service's own command (one run of it), each with a new key."""
    command = [sys.executable, str(ROOT / "manage.py"), "agent_create"]
    command += [f"load-{run}-{number}" for number in range(count)]
    command += ["--key-name", "bench-load", "--heavy-concurrency", str(heavy)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    keys = done.stdout.strip().splitlines()[-count:]
    if done.returncode or len(keys) != count:
        sys.exit(f"agent_create failed: {done.stderr.strip()[-500:]}")
    return keys


def seed_threads(seats: list[Seat], entries: int) -> None:
    def seed(seat: Seat) -> None:
        status, payload = seat.client.call("POST", "/api/v1/threads", {"id": seat.thread_id})
        if status not in (200, 201):
            raise RuntimeError(f"cannot create thread {seat.thread_id}: {status} {payload}")
        for offset in range(0, entries, 50):
            turns = [
                {"role": "user" if i % 2 == 0 else "assistant", "content": SENTENCES[i % len(SENTENCES)]}
                for i in range(offset, min(entries, offset + 50))
            ]
            status, payload = seat.client.call("POST", f"/api/v1/threads/{seat.thread_id}/entries", {"entries": turns})
            if status not in (200, 201):
                raise RuntimeError(f"cannot seed {seat.thread_id}: {status} {payload}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(seed, seats))


def parse_mix(text: str) -> dict[str, int]:
    mix: dict[str, int] = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        if name.strip() not in KINDS or not weight.strip().isdigit():
            sys.exit(f"--mix: {part!r} is not KIND=WEIGHT with KIND one of {', '.join(KINDS)}")
        mix[name.strip()] = int(weight)
    if not any(mix.values()):
        sys.exit("--mix: every weight is 0")
    return mix


def wait_for(url: str, limit: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < limit:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return time.monotonic() - began
        except OSError:
            pass
        time.sleep(0.2)
    return None


# --- main ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the service's URL, e.g. http://127.0.0.1:8000 (loopback)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of mixed load (default 60)")
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"weights of the kinds (default {DEFAULT_MIX})")
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--keys", type=Path, help="a file of agent keys, one a line, instead of creating agents")
    parser.add_argument("--seed-entries", type=int, default=40, help="turns in each client's thread before the load")
    parser.add_argument("--kind-clients", type=int, default=8, help="clients of each one-kind CPU phase")
    parser.add_argument("--kind-seconds", type=float, default=10.0, help="seconds of each one-kind phase (0: none)")
    parser.add_argument("--max-requests", type=int, default=200_000, help="at most this many requests a phase")
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=180.0,
        help="at most this long, wait for the worker to embed the turns written before and in each phase (0: no wait)",
    )
    parser.add_argument("--cold", action="store_true", help="start the service here and time its first requests")
    parser.add_argument("--keep", action="store_true", help="keep the bench threads")
    parser.add_argument(
        "--fresh-queries",
        action="store_true",
        help="every search and context build asks a new question (no cached vector)",
    )
    parser.add_argument(
        "--pgdata",
        type=Path,
        default=Path(os.environ.get("EMBEDDED_PGDATA", ROOT / "var" / "pgdata")),
        help="data directory of the service's embedded PostgreSQL, for its CPU per request (default var/pgdata)",
    )
    args = parser.parse_args(argv)
    _, port = loopback_only(args.base)
    global FRESH_QUERIES
    FRESH_QUERIES = args.fresh_queries
    mix = parse_mix(args.mix)
    run = uuid.uuid4().hex[:8]

    service: subprocess.Popen[bytes] | None = None
    if args.cold:
        service, figures = cold_start(args.base, port)
        print(figures)
    else:
        # A web process loading its model after a start burns CPU that no request asked for.
        waited = wait_for(f"{args.base}/readyz", 300)
        if waited is None:
            sys.exit(f"{args.base}/readyz did not answer 200 within 300 s")
    try:
        pids = web_processes(port)
        if not pids:
            print(f"note: no gunicorn process bound to :{port} found here; CPU figures will read 0")
        load(args, mix, run, pids, cold=args.cold)
    finally:
        if service is not None:
            os.killpg(service.pid, signal.SIGTERM)
            service.wait(timeout=60)


def cold_start(base: str, port: int) -> tuple[subprocess.Popen[bytes], str]:
    """Start `make run`'s launcher on `port`; the seconds until /healthz and /readyz answer."""
    if wait_for(f"{base}/healthz", 0.5) is not None:
        sys.exit(f"--cold: something answers on {base} already; stop it first")
    env = dict(os.environ, PORT=str(port), HF_HUB_OFFLINE="1")
    service = subprocess.Popen(
        [sys.executable, "-m", "memory_project.launcher"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    began = time.monotonic()
    healthy = wait_for(f"{base}/healthz", 300)
    ready = wait_for(f"{base}/readyz", 300)
    total = time.monotonic() - began
    healthy_text = "never" if healthy is None else f"{healthy:.1f} s"
    return (
        service,
        f"cold start: /healthz after {healthy_text}, /readyz after {total if ready is not None else 0:.1f} s",
    )


def settle(workers: list[int], longest: float, pending: Callable[[], int | None] | None = None) -> float | None:
    """Wait until the turns written so far are embedded, at most `longest` seconds: the seed's
    embeddings are no request's, and one phase's turns embedded during the next were counted as
    that one's (the worker runs at nice 10, behind the requests); both made the worker's CPU per
    request of a kind read up to twice what it cost (and 2.5x, measured, when the seed's were
    counted in the mixed phase). Done when the bench's threads hold no turn without a vector
    (`pending`, read from the service's database where the bench can reach it) and the worker's
    CPU stayed flat for two seconds: a flat CPU alone also ended the wait while a worker at nice 10
    on a busy machine was only waiting for a core. The seconds waited, or None without a worker
    here to watch."""
    if not workers or longest <= 0:
        return None
    began = time.monotonic()
    used = cpu_seconds(workers)
    while time.monotonic() - began < longest:
        time.sleep(2.0)
        now = cpu_seconds(workers)
        if now - used < 0.1 and not (pending() if pending is not None else 0):
            break
        used = now
    return time.monotonic() - began


def pending_vectors(pgdata: Path, run: str) -> Callable[[], int | None] | None:
    """A count of the bench's turns (threads `load-<run>-*`) still without a vector, read from the
    service's database (DATABASE_URL, else the embedded server of `pgdata` through its socket);
    None when the bench cannot reach it (the wait is then on the worker's CPU alone). A read
    that fails answers None too."""
    import psycopg

    url = os.environ.get("DATABASE_URL", "")
    if not url:
        try:
            lines = (pgdata / "postmaster.pid").read_text().splitlines()
            url = f"postgresql://postgres@/memory?host={lines[4]}&port={lines[3]}"
        except (OSError, IndexError):
            return None
    try:
        connection = psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.Error:
        return None
    statement = """
        SELECT count(*) FROM memoryapp_entry e JOIN memoryapp_thread t ON t.id = e.thread_id
         WHERE t.external_id LIKE %s AND e.type = 'message' AND e.embedding IS NULL
           AND e.redacted_at IS NULL AND e.held_at IS NULL AND e.text <> ''
    """

    def count() -> int | None:
        try:
            row = connection.execute(statement, [f"load-{run}-%"]).fetchone()
        except psycopg.Error:
            return None
        return int(row[0]) if row else None

    return count


def load(args: argparse.Namespace, mix: dict[str, int], run: str, pids: list[int], *, cold: bool) -> None:
    per_agent = max(1, -(-args.clients // args.agents))
    if args.keys:
        keys = [line.strip() for line in args.keys.read_text().splitlines() if line.strip()]
    else:
        began = time.perf_counter()
        keys = create_agents(args.agents, run, heavy=per_agent)
        print(f"{len(keys)} agents created through manage.py agent_create in {time.perf_counter() - began:.1f} s")
    seats = [
        Seat(Client(args.base, keys[n % len(keys)]), f"load-{run}-{n:03d}")
        for n in range(max(args.clients, args.kind_clients))
    ]
    began = time.perf_counter()
    seed_threads(seats, args.seed_entries)
    print(f"{len(seats)} threads of {args.seed_entries} turns seeded in {time.perf_counter() - began:.1f} s")
    pending = None if cold else pending_vectors(args.pgdata, run)
    if not cold and (settled := settle(worker_processes(pids), args.settle_seconds, pending)) is not None:
        print(f"the worker embedded the seeded turns in {settled:.1f} s (its CPU then stayed flat)")
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    print(f"web processes {pids}; load average {' '.join(load_before)} (2 cores shared with other work)")

    weights = [(kind, weight) for kind, weight in mix.items() if weight]
    kinds, cumulative = [k for k, _ in weights], []
    total = 0
    for _, weight in weights:
        total += weight
        cumulative.append(total)

    def pick(rng: random.Random) -> str:
        return rng.choices(kinds, cum_weights=cumulative)[0]

    try:
        if cold:
            tally, wall, cpu = run_phase(
                seats[: args.clients], pick, seconds=args.duration, max_requests=args.max_requests, pids=pids
            )
            print(
                f"first {args.duration:g} s after readyz: {tally.count / wall:.1f} req/s, errors {dict(tally.errors)}"
            )
            for kind in kinds:
                first = tally.firsts.get(kind)
                print(kind_line(kind, tally.latencies.get(kind, []), wall) + f"  first {(first or 0) * 1000:.0f} ms")
            return

        postmaster = postgres_postmaster(args.pgdata)
        workers = worker_processes(pids)

        def side_cpu() -> tuple[float, float]:
            return cpu_seconds(workers), postgres_cpu_seconds(postmaster)

        def side_ms(before: tuple[float, float], count: int) -> tuple[float, float]:
            after = side_cpu()
            worker, postgres = ((a - b) * 1000 / max(count, 1) for a, b in zip(after, before, strict=True))
            return worker, postgres

        def side_line(before: tuple[float, float], count: int) -> str:
            if not count:
                return ""
            worker, postgres = side_ms(before, count)
            return f"  worker {worker:6.2f}  PostgreSQL {postgres:6.2f} ms/req"

        print(f"worker and beat {workers or 'not found'}; PostgreSQL {postmaster or 'not found'} ({args.pgdata})")
        per_request: dict[str, float] = {}
        small = seats[: args.kind_clients]
        if args.kind_seconds > 0:
            print(f"one kind at a time, {len(small)} clients, {args.kind_seconds:g} s each: web CPU per request")
            for kind in ("healthz", *kinds):
                sides = side_cpu()
                tally, wall, cpu = run_phase(
                    small, _always(kind), seconds=args.kind_seconds, max_requests=args.max_requests, pids=pids
                )
                settle(workers, args.settle_seconds, pending)
                per_request[kind] = cpu / tally.count if tally.count else float("nan")
                ratio = per_request[kind] / per_request["healthz"] if per_request.get("healthz") else float("nan")
                errors = f"  errors {dict(tally.errors)}" if tally.errors else ""
                print(
                    kind_line(kind, tally.latencies.get(kind, []), wall)
                    + f"  web CPU {per_request[kind] * 1000:6.2f} ms/req = {ratio:5.1f}x healthz"
                    + side_line(sides, tally.count)
                    + errors
                )

        sides = side_cpu()
        clients_before = time.process_time()
        tally, wall, cpu = run_phase(
            seats[: args.clients], pick, seconds=args.duration, max_requests=args.max_requests, pids=pids
        )
        clients_cpu = time.process_time() - clients_before
        mixed = tally.count
        settle(workers, args.settle_seconds, pending)
        mixed_worker, mixed_postgres = side_ms(sides, mixed)
        print(
            f"mixed load, {args.clients} clients, {len(keys)} agents, {wall:.1f} s, mix {args.mix}: "
            f"{mixed} requests = {mixed / wall:.1f} req/s, errors {sum(tally.errors.values())}"
            + (f" {dict(tally.errors)}" if tally.errors else "")
        )
        everything = [s for values in tally.latencies.values() for s in values]
        print(kind_line("all", everything, wall))
        for kind in kinds:
            print(kind_line(kind, tally.latencies.get(kind, []), wall))
        if mixed:
            expected = sum(per_request.get(k, 0.0) * len(tally.latencies.get(k, [])) for k in kinds)
            share = f"; the one-kind phases' CPU predicts {expected * 1000 / mixed:.2f} ms" if expected else ""
            print(f"mixed web CPU {cpu * 1000 / mixed:.2f} ms/req ({cpu / wall:.2f} cores){share}")
            web_ms = cpu * 1000 / mixed
            in_all = web_ms + mixed_worker + mixed_postgres
            print(
                f"mixed, the service's other processes:  worker {mixed_worker:6.2f}  PostgreSQL {mixed_postgres:6.2f}"
                f" ms/req; in all {in_all:.2f} ms/req (two idle cores: at most {2000 / in_all:.0f} req/s of this mix);"
                f" the bench's own clients {clients_cpu * 1000 / mixed:.2f} ms/req on the same cores"
            )
        print(f"load average after: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    finally:
        if not args.keep:
            for seat in seats:
                try:
                    seat.client.call("DELETE", f"/api/v1/threads/{seat.thread_id}")
                except Exception:  # the service went away: nothing more to clean here
                    break
        for seat in seats:
            seat.client.close()


if __name__ == "__main__":
    main()
