"""Every management command of the project says to migrate first on a database that is not
migrated, instead of dying in a traceback; checked on a real, empty database."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.management import get_commands, load_command_class

from memory_project.commands import ProjectCommand
from tests.kit import PROJECT_ROOT

PROJECT_APPS = ("memoryapp", "governance")


def test_every_project_command_checks_the_database_first() -> None:
    ours = {name: app for name, app in get_commands().items() if app in PROJECT_APPS}
    assert {"agent_create", "eval_retrieval", "audit_verify"} <= set(ours)
    for name, app in ours.items():
        assert isinstance(load_command_class(app, name), ProjectCommand), name


@pytest.mark.slow
@pytest.mark.parametrize(
    "arguments",
    [
        ["agent_create", "alice"],
        ["eval_retrieval", "--locomo", "missing.json"],
        ["thread_export", "alice", "t1"],
        ["audit_verify"],
    ],
)
def test_a_command_on_an_unmigrated_database_says_to_migrate_without_a_traceback(
    empty_database: str, arguments: list[str]
) -> None:
    env = {**os.environ, "DATABASE_URL": empty_database}
    done = subprocess.run(
        [sys.executable, "manage.py", *arguments],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "does not exist" not in done.stderr, done.stderr
    assert "not migrated yet" in done.stderr
    assert "make run" in done.stderr and "manage.py migrate" in done.stderr
