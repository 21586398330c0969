"""The fixed cast: agents alice and bob, and mallory who must see nothing of theirs.

What tests share besides the cast lives in tests/kit (factories, API calls, servers)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

# pydantic's v1 types (Presidio -> spaCy import them when screening builds a detector, lazily, on
# the first text that may hold a category) subclass datetime.date as they are imported: imported
# first inside a test's freeze_time they would subclass freezegun's fake date, and fail (metaclass
# conflict). Imported here, before any test freezes the clock; 0.1 s.
import pydantic.v1  # noqa: F401
import pytest
from rest_framework.test import APIClient

from tests.kit.api import Caller, agent_caller
from tests.kit.servers import database_conninfo, database_url

# The browser tests' `chromium` fixture (tests/kit/browser.py).
pytest_plugins = ["tests.kit.browser"]

# Test modules take the cast's type, and the URL of the tests' database, from here.
__all__ = ["Caller", "database_url"]


@pytest.fixture(autouse=True)
def audit_anchor_file(tmp_path: Path, settings: Any) -> Path:
    """Each test anchors its audit chain in a file of its own: a chain starts again at seq 1 in
    every test, and must not be compared with the anchors of another test's chain."""
    settings.AUDIT_ANCHOR_FILE = tmp_path / "audit-anchors.log"
    return settings.AUDIT_ANCHOR_FILE


@pytest.fixture(autouse=True)
def broker_breaker_closed() -> None:
    """The broker breaker is per process: a test that took the broker away must not leave the
    next test's sends skipped."""
    from governance.jobs.broker import broker_breaker_reset

    broker_breaker_reset()


@pytest.fixture
def alice(db: None) -> Caller:
    return agent_caller("alice")


@pytest.fixture
def bob(db: None) -> Caller:
    return agent_caller("bob")


@pytest.fixture
def mallory(db: None) -> Caller:
    return agent_caller("mallory")


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


@pytest.fixture
def empty_database(db: None) -> Iterator[str]:
    """A DATABASE_URL of a database just created on the tests' server, with no table at all."""
    name = f"empty_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_conninfo(name="postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(name=name)
    finally:
        with psycopg.connect(database_conninfo(name="postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
