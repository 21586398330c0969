from __future__ import annotations

import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from psycopg import IsolationLevel
from rest_framework.test import APIClient

from governance.models import AuditRecord
from memory_project.env import env_bool, env_choice, env_float, env_int, env_list, env_url
from memory_project.settings import database_from_url
from memoryapp.agents.selectors import hash_key
from memoryapp.agents.services import agent_key_revoke
from memoryapp.models import Agent, AgentKey

pytestmark = pytest.mark.django_db


# --- settings ---------------------------------------------------------------------------------


def test_env_int_refuses_text_naming_the_variable() -> None:
    with pytest.raises(ImproperlyConfigured, match="API_PAGE_SIZE must be an integer"):
        env_int("API_PAGE_SIZE", 10, environ={"API_PAGE_SIZE": "ten"})


def test_env_int_refuses_out_of_range() -> None:
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("X", 10, minimum=1, environ={"X": "0"})


def test_env_bool_reads_words_and_refuses_others() -> None:
    assert env_bool("DEBUG", False, environ={"DEBUG": "yes"}) is True
    assert env_bool("DEBUG", True, environ={"DEBUG": "0"}) is False
    assert env_bool("DEBUG", True, environ={}) is True
    with pytest.raises(ImproperlyConfigured, match="DEBUG must be a boolean"):
        env_bool("DEBUG", False, environ={"DEBUG": "maybe"})


def test_env_float_choice_and_list() -> None:
    assert env_float("T", 1.0, environ={"T": "2.5"}) == 2.5
    with pytest.raises(ImproperlyConfigured):
        env_float("T", 1.0, environ={"T": "fast"})
    assert env_choice("EMBEDDER", "local", ("local", "fake"), environ={"EMBEDDER": "FAKE"}) == "fake"
    with pytest.raises(ImproperlyConfigured, match="EMBEDDER must be one of local, fake"):
        env_choice("EMBEDDER", "local", ("local", "fake"), environ={"EMBEDDER": "bert"})
    assert env_list("ALLOWED_HOSTS", [], environ={"ALLOWED_HOSTS": "a.com, b.com,"}) == ["a.com", "b.com"]


def test_env_url_refuses_another_scheme() -> None:
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL must be a URL starting with postgres://"):
        env_url("DATABASE_URL", ("postgres", "postgresql"), environ={"DATABASE_URL": "sqlite:///db.sqlite3"})
    assert env_url("REDIS_URL", ("redis",), environ={}) == ""


def test_database_url_reads_tcp_and_socket_forms() -> None:
    tcp = database_from_url("postgres://u:p%40ss@db.example:5433/memory?sslmode=require")
    assert (tcp["HOST"], tcp["PORT"], tcp["NAME"], tcp["USER"], tcp["PASSWORD"]) == (
        "db.example",
        "5433",
        "memory",
        "u",
        "p@ss",
    )
    assert tcp["OPTIONS"] == {"sslmode": "require", "isolation_level": IsolationLevel.READ_COMMITTED}
    sock = database_from_url("postgresql://postgres:@/memory?host=/tmp/pg")
    assert (sock["HOST"], sock["NAME"], sock["OPTIONS"]) == (
        "/tmp/pg",
        "memory",
        {"isolation_level": IsolationLevel.READ_COMMITTED},
    )


# --- key authentication -------------------------------------------------------------------------


def test_api_root_needs_a_key(anonymous: APIClient) -> None:
    response = anonymous.get("/api/v1/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Bearer"


def test_api_root_answers_a_valid_key(alice) -> None:
    response = alice.client.get("/api/v1/")
    assert response.status_code == 200
    assert response.json()["agent"]["slug"] == "alice"
    key = AgentKey.objects.get(agent=alice.agent)
    assert key.last_used_at is not None


def test_wrong_key_is_refused(alice, anonymous: APIClient) -> None:
    anonymous.credentials(HTTP_AUTHORIZATION=f"Bearer {alice.key[:-4]}xxxx")
    response = anonymous.get("/api/v1/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_key"


def test_malformed_authorization_header_is_refused(anonymous: APIClient) -> None:
    anonymous.credentials(HTTP_AUTHORIZATION="Bearer")
    assert anonymous.get("/api/v1/").status_code == 401


def test_revoked_key_is_refused_and_audited(alice) -> None:
    key = AgentKey.objects.get(agent=alice.agent)
    agent_key_revoke(key=key, actor="staff:test")
    response = alice.client.get("/api/v1/")
    assert response.status_code == 401
    record = AuditRecord.objects.filter(action="agent_key.revoked").get()
    assert record.subject == key.prefix and record.outcome == "revoked"


def test_keys_are_stored_hashed_with_a_visible_prefix(alice) -> None:
    key = AgentKey.objects.get(agent=alice.agent)
    assert alice.key not in (key.key_hash, key.prefix)
    assert key.key_hash == hash_key(alice.key)
    assert alice.key.startswith(key.prefix + "_")


def test_agent_create_command_prints_key_on_last_line(capsys) -> None:
    from django.core.management import call_command

    call_command("agent_create", "carol")
    first = capsys.readouterr().out.strip().splitlines()[-1]
    call_command("agent_create", "carol")
    second = capsys.readouterr().out.strip().splitlines()[-1]
    assert first != second
    assert AgentKey.objects.filter(agent__slug="carol").count() == 2
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {second}")
    assert client.get("/api/v1/").status_code == 200


def test_agent_create_command_makes_several_agents_with_their_limits(capsys) -> None:
    from django.core.management import call_command

    call_command("agent_create", "dora", "eve", "--heavy-concurrency", "7", "--rate-per-minute", "0")
    keys = capsys.readouterr().out.strip().splitlines()
    assert len(keys) == 2
    for slug, raw in zip(("dora", "eve"), keys, strict=True):
        agent = Agent.objects.get(slug=slug)
        assert (agent.heavy_concurrency, agent.rate_limit_per_minute) == (7, 0)
        assert AgentKey.objects.get(agent=agent).key_hash == hash_key(raw)
        assert AuditRecord.objects.filter(action="agent.limits_set", agent_id=agent.pk).count() == 1


# --- health --------------------------------------------------------------------------------------


def test_healthz_answers(anonymous: APIClient) -> None:
    response = anonymous.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_readyz_reports_every_check_true(anonymous: APIClient) -> None:
    response = anonymous.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["checks"] == {
        "database": True,
        "migrations": True,
        "vector": True,
        "embeddings": True,
        "encryption": True,
        "embedding_model": True,
        "broker": True,
    }


def test_readyz_shows_job_runs_no_worker_took_without_turning_unready(anonymous: APIClient) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from governance.models import JobRun

    since = timezone.now() - timedelta(hours=3)
    JobRun.objects.create(kind="extraction", task_name="memoryapp.tasks.extract_thread", sent_at=since)
    response = anonymous.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["details"]["jobs_waiting"] == [
        {"queue": "extraction", "task": "memoryapp.tasks.extract_thread", "runs": 1, "since": since.isoformat()}
    ]


def test_readyz_reports_an_unreachable_broker(anonymous: APIClient, settings) -> None:
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = anonymous.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"] is False


def test_readyz_reports_a_vector_dimension_mismatch(anonymous: APIClient, settings) -> None:
    settings.EMBEDDING_DIMENSIONS = 768
    response = anonymous.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["embeddings"] is False
    assert "384 dimensions" in body["details"]["embeddings"]


def test_api_docs_and_schema_load(anonymous: APIClient) -> None:
    assert anonymous.get("/api/docs/").status_code == 200
    schema = anonymous.get("/api/schema/")
    assert schema.status_code == 200


def test_api_docs_page_loads_pinned_assets_we_serve_and_nothing_from_another_host(anonymous: APIClient) -> None:
    page = anonymous.get("/api/docs/").content.decode()
    assert "http://" not in page and "https://" not in page  # no CDN, no public validator
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets) and any(a.endswith(".css") for a in assets)
    for asset in assets:
        assert asset.startswith("/static/") and not asset.startswith("//"), asset
        response = anonymous.get(asset)
        assert response.status_code == 200, asset
        assert b"".join(response.streaming_content), asset  # type: ignore[attr-defined]


def test_admin_login_page_loads(client) -> None:
    response = client.get("/admin/login/")
    assert response.status_code == 200
