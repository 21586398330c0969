"""The fixed cast: agents alice and bob, and mallory who must see nothing of theirs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection
from rest_framework.test import APIClient

from memoryapp.keys import agent_get_or_create, agent_key_create
from memoryapp.models import Agent


@dataclass
class Caller:
    agent: Agent
    key: str
    client: APIClient


def _caller(slug: str) -> Caller:
    agent, _ = agent_get_or_create(slug=slug)
    _, raw = agent_key_create(agent=agent)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return Caller(agent=agent, key=raw, client=client)


@pytest.fixture(autouse=True)
def audit_anchor_file(tmp_path: Path, settings: Any) -> Path:
    """Each test anchors its audit chain in a file of its own: a chain starts again at seq 1 in
    every test, and must not be compared with the anchors of another test's chain."""
    settings.AUDIT_ANCHOR_FILE = tmp_path / "audit-anchors.log"
    return settings.AUDIT_ANCHOR_FILE


@pytest.fixture
def alice(db: None) -> Caller:
    return _caller("alice")


@pytest.fixture
def bob(db: None) -> Caller:
    return _caller("bob")


@pytest.fixture
def mallory(db: None) -> Caller:
    return _caller("mallory")


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


def database_url(*, name: str | None = None) -> str:
    """A DATABASE_URL for a server process or a command the tests start: the tests' database, or
    `name` on the same server (the embedded server's host is a socket directory)."""
    d = connection.settings_dict
    user, password = quote(d["USER"] or ""), quote(d["PASSWORD"] or "")
    database, host, port = name or d["NAME"], d["HOST"] or "", d["PORT"] or ""
    if host.startswith("/"):
        return f"postgres://{user}:{password}@/{database}?host={quote(host)}" + (f"&port={port}" if port else "")
    return f"postgres://{user}:{password}@{host}{':' + port if port else ''}/{database}"
