"""Health endpoints: /healthz (the process answers) and /readyz (what it depends on answers)."""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse

from governance.audit.chain import audit_verification_latest
from governance.crypto.startup import encryption_refusal
from memoryapp.search.embedders import local_model_not_ready, local_model_preload
from memoryapp.search.space import vector_space_status


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def database_probe() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True, ""
    except Exception as exc:  # readiness reports, it never raises
        return False, f"{type(exc).__name__}: {exc}"


def _migrations() -> tuple[bool, str]:
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return (not plan), (f"{len(plan)} migrations not applied: run `python manage.py migrate`" if plan else "")


def _vector() -> tuple[bool, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    if row is None:
        return False, "the pgvector extension `vector` is not installed in this database"
    return True, f"pgvector {row[0]}"


def broker_probe() -> tuple[bool, str]:

    try:
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_connect_timeout=1, socket_timeout=1)
        client.ping()
        return True, ""
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


def _embeddings() -> tuple[bool, str]:

    # Ready when the query vectors fit the columns. Vectors of another model (`stale`) leave the
    # process ready: the message says so, the vector channel is kept for a close variant or off
    # for another model (search answers by keyword), and taking web processes out would not move
    # a vector (`reembed` does).
    status = vector_space_status()
    return status.ready, status.message


def _vector_space() -> dict[str, Any]:
    status = vector_space_status()
    return {
        "recorded": status.recorded,
        "configured": status.configured,
        "stale": status.stale,
        "vector_channel": status.ok,
        "moving_to": status.moving_to,
    }


def _encryption() -> tuple[bool, str]:
    reason = encryption_refusal()
    return (not reason), reason


def _jobs_waiting() -> list[dict[str, Any]]:
    from governance.jobs.sweep import jobs_waiting

    return [{**row, "since": row["since"].isoformat()} for row in jobs_waiting()]


def readyz(request: HttpRequest) -> JsonResponse:
    """Ready when every check passes. Job runs no worker took (a queue no worker consumes, a
    backlog) are shown under `details.jobs_waiting` without making the web process unready: a load
    balancer taking it out would not bring a worker. So is the newest daily verification of the
    audit chain (`details.audit_chain`: ok, or the first broken seq and why): a broken chain is for
    a person to look into, and taking the web process out would not mend it."""
    checks: dict[str, bool] = {}
    details: dict[str, Any] = {}
    ok, detail = database_probe()
    checks["database"] = ok
    if ok:
        for name, probe in (
            ("migrations", _migrations),
            ("vector", _vector),
            ("embeddings", _embeddings),
            ("encryption", _encryption),
        ):
            try:
                passed, detail = probe()
            except Exception as exc:
                passed, detail = False, f"{type(exc).__name__}: {exc}"
            checks[name] = passed
            if detail:
                details[name] = detail
        if checks["migrations"]:
            try:
                details["vector_space"] = _vector_space()
            except Exception as exc:
                details["vector_space"] = f"{type(exc).__name__}: {exc}"
            try:
                if waiting := _jobs_waiting():
                    details["jobs_waiting"] = waiting
            except Exception as exc:
                details["jobs_waiting"] = f"{type(exc).__name__}: {exc}"
            try:
                if (verified := audit_verification_latest()) is not None:
                    details["audit_chain"] = {**verified, "at": verified["at"].isoformat() if verified["at"] else None}
            except Exception as exc:
                details["audit_chain"] = f"{type(exc).__name__}: {exc}"
    else:
        details["database"] = detail
        checks.update(migrations=False, vector=False, embeddings=False, encryption=False)
    # The local model, loaded in this process: until then a search would pay the load (tens of
    # seconds), so the process is not ready. Asking starts the load if nothing did.
    local_model_preload()
    not_loaded = local_model_not_ready()
    checks["embedding_model"] = not not_loaded
    if not_loaded:
        details["embedding_model"] = not_loaded
    passed, detail = broker_probe()
    checks["broker"] = passed
    if detail:
        details["broker"] = detail
    ready = all(checks.values())
    return JsonResponse(
        {"status": "ready" if ready else "not ready", "checks": checks, "details": details},
        status=200 if ready else 503,
    )
