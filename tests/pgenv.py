"""Loaded by pytest before Django: the tests get their own throwaway embedded PostgreSQL.

Unless DATABASE_URL is set, a fresh data directory is made under var/, the server started
there, and stopped and deleted when the session ends. Celery runs tasks eagerly in the test
process unless a test starts a real worker (see tests/governance/test_jobs.py).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("EMBEDDER", "fake")
os.environ.setdefault("LLM_PROVIDER", "scripted")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The abuse limits are off by default in the tests (tours and concurrency tests send many requests
# with one key); tests/api/test_limits.py sets them per agent, as an operator does.
os.environ.setdefault("API_RATE_PER_MINUTE", "0")
os.environ.setdefault("API_HEAVY_CONCURRENCY", "0")
# So is the limit of failed authentications per client address (every test client is 127.0.0.1, and
# many tests send bad keys on purpose); tests/api/test_auth_failures.py turns it on.
os.environ.setdefault("API_AUTH_FAILURES_PER_MINUTE", "0")
# And the admin's sign-in lockout (tests/admin/test_login_lockout.py turns it on).
os.environ.setdefault("ADMIN_LOGIN_FAILURES", "0")
os.environ.setdefault("ADMIN_LOGIN_ADDRESS_FAILURES", "0")

# Audit anchors of the test runs never go to the service's var/ (tests/conftest.py gives each test
# a file of its own; this one catches what runs outside a test, and worker processes).
if not os.environ.get("AUDIT_ANCHOR_FILE"):
    _anchors = tempfile.mkdtemp(prefix="test-anchors-")
    os.environ["AUDIT_ANCHOR_FILE"] = os.path.join(_anchors, "audit-anchors.log")
    atexit.register(shutil.rmtree, _anchors, True)

if not os.environ.get("REDIS_URL"):
    # A database of its own on the local Redis, so a running service never takes the tests' jobs.
    from memory_project import embedded

    os.environ["REDIS_URL"] = embedded.redis_url(_ROOT / "var").rsplit("/", 1)[0] + "/15"

if not os.environ.get("DATABASE_URL") and not os.environ.get("EMBEDDED_PGDATA"):
    (_ROOT / "var").mkdir(exist_ok=True)
    _tmp = Path(tempfile.mkdtemp(prefix="test-pg-", dir=_ROOT / "var"))
    _pgdata = _tmp / "pgdata"
    os.environ["EMBEDDED_PGDATA"] = str(_pgdata)

    def _drop() -> None:
        from memory_project import embedded

        embedded.postgres_stop(_pgdata)
        shutil.rmtree(_tmp, ignore_errors=True)

    atexit.register(_drop)
