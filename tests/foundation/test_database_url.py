"""DATABASE_URL's query string: libpq's parameters pass on, Django's typed options the service can
run with are read as their type, and everything else stops the service at start, naming it.

`server_side_binding=true` used to reach Django as the string "true", which it took for off, so
the setting was dropped without a word; the service's queries cannot run with it anyway (several
statements in one string: `SET LOCAL ...; SELECT ...`, refused by a prepared statement)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from memory_project.settings import database_from_url
from tests.kit import PROJECT_ROOT

BASE = "postgres://u:p@db.example:5432/memory"


def test_libpq_parameters_pass_on_as_written() -> None:
    url = f"{BASE}?sslmode=verify-full&connect_timeout=5&application_name=memory&options=-c%20statement_timeout%3D5000"
    options = database_from_url(url, pool_size=0)["OPTIONS"]
    assert {k: v for k, v in options.items() if k != "isolation_level"} == {
        "sslmode": "verify-full",
        "connect_timeout": "5",
        "application_name": "memory",
        "options": "-c statement_timeout=5000",
    }


def test_server_side_binding_false_is_what_the_service_does_and_true_is_refused() -> None:
    assert "server_side_binding" not in database_from_url(f"{BASE}?server_side_binding=false", pool_size=0)["OPTIONS"]
    for value in ("true", "1", "on"):
        with pytest.raises(ImproperlyConfigured, match="server_side_binding=true is not supported"):
            database_from_url(f"{BASE}?server_side_binding={value}", pool_size=0)
    with pytest.raises(ImproperlyConfigured, match="server_side_binding must be false, not 'maybe'"):
        database_from_url(f"{BASE}?server_side_binding=maybe", pool_size=0)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("sslmod=require", "DATABASE_URL's sslmod is neither a libpq connection parameter"),
        ("isolation_level=serializable", "DATABASE_URL's isolation_level is not supported"),
        ("pool=true", "DATABASE_URL's pool is not supported: set DB_POOL_SIZE"),
        ("sslmode=require&sslmode=disable", "DATABASE_URL gives sslmode 2 times"),
    ],
)
def test_an_option_the_service_would_drop_or_misread_is_refused_naming_it(query: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        database_from_url(f"{BASE}?{query}", pool_size=0)


def test_the_service_does_not_start_with_an_option_it_would_drop() -> None:
    env = {**os.environ, "DATABASE_URL": f"{BASE}?server_side_binding=true"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "server_side_binding=true is not supported" in done.stderr
