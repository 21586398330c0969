"""`make run`: the whole service in one command.

1. Settings are loaded, which starts the embedded PostgreSQL and Redis when no URL is given.
2. Migrations are applied (after a clear check that the database has pgvector).
3. An admin account is created on the first start (ADMIN_PASSWORD, or generated and printed once).
4. The web server (gunicorn), a Celery worker and Celery beat run as child processes.
5. Ctrl-C (or SIGTERM) stops the children, then the embedded servers this launcher started.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from types import FrameType

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")


def _check_vector_available() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            sys.exit(
                "The database has no pgvector extension (`vector`) available. Install pgvector on that "
                "server (or use the pgvector/pgvector image), or unset DATABASE_URL to use the embedded PostgreSQL."
            )


def _ensure_admin() -> None:
    from django.conf import settings
    from django.contrib.auth import get_user_model

    users = get_user_model()
    if users.objects.filter(is_superuser=True).exists():
        return
    password = settings.ADMIN_PASSWORD or secrets.token_urlsafe(12)
    users.objects.create_superuser(settings.ADMIN_USERNAME, settings.ADMIN_EMAIL, password)
    shown = "(from ADMIN_PASSWORD)" if settings.ADMIN_PASSWORD else password
    print(
        f"\n  Admin account created: {settings.ADMIN_USERNAME} / {shown}  (shown once; change it in the admin)\n",
        flush=True,
    )


def main() -> int:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from memory_project import embedded
    from memory_project.env import env_int

    _check_vector_available()
    call_command("migrate", interactive=False, verbosity=0)
    _ensure_admin()

    port = os.environ.get("PORT", "8000")
    host = os.environ.get("HOST", "127.0.0.1")
    python = sys.executable
    web_workers = os.environ.get("WEB_WORKERS", "3")
    web_threads = os.environ.get("WEB_THREADS", "4")
    worker_concurrency = os.environ.get("WORKER_CONCURRENCY", "2")
    # Background jobs (embedding above all) yield the CPU to requests when they share a machine.
    worker_nice = env_int("WORKER_NICE", 10, minimum=0, maximum=19)
    commands = {
        "web": [
            python,
            "-m",
            "gunicorn",
            "memory_project.wsgi:application",
            "--bind",
            f"{host}:{port}",
            "--workers",
            web_workers,
            "--threads",
            web_threads,
            "--worker-class",
            "gthread",
            "--access-logfile",
            "-",
            "--graceful-timeout",
            "10",
        ],
        "worker": [
            python,
            "-m",
            "celery",
            "-A",
            "memory_project",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            worker_concurrency,
            "-Q",
            ",".join(settings.CELERY_WORKER_QUEUES),
        ],
        "beat": [python, "-m", "celery", "-A", "memory_project", "beat", "--loglevel", "INFO"],
    }
    children: dict[str, subprocess.Popen[bytes]] = {}
    for name, command in commands.items():
        if name != "web" and worker_nice:
            command = ["nice", "-n", str(worker_nice), *command]
        children[name] = subprocess.Popen(command, start_new_session=True)

    base = f"http://{host}:{port}"
    print(
        f"\n  Memory service running (web, worker, beat)\n"
        f"    admin:   {base}/admin/\n"
        f"    API:     {base}/api/v1/   docs: {base}/api/docs/\n"
        f"    health:  {base}/healthz   ready: {base}/readyz\n"
        f"  Ctrl-C stops everything.\n",
        flush=True,
    )

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    exit_code = 0
    while not stopping:
        for name, child in children.items():
            if child.poll() is not None:
                print(f"  {name} exited with {child.returncode}; stopping the service", flush=True)
                exit_code = child.returncode or 1
                stopping = True
                break
        time.sleep(0.5)

    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.time() + 15
    for child in children.values():
        try:
            child.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            child.kill()
    from django.db import connections

    connections.close_all()
    if settings.USES_EMBEDDED_POSTGRES:
        embedded.postgres_stop(settings.EMBEDDED_PGDATA)
    if not os.environ.get("REDIS_URL") and not embedded.redis_answers(*embedded.LOCAL_REDIS):
        embedded.redis_stop(settings.VAR_DIR)
    print("  stopped", flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
