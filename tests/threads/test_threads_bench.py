"""The write bench runs end to end against a live server (tiny numbers; it prints, never asserts durations)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from memoryapp.models import Thread
from tests.conftest import Caller

BENCH = Path(__file__).resolve().parents[2] / "bench" / "write_entries.py"


def load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("write_entries", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["write_entries"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def database_url(settings_dict: dict[str, Any]) -> str:
    """A libpq conninfo of the test database (its host may be a socket directory)."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(
        dbname=settings_dict["NAME"],
        user=settings_dict["USER"] or None,
        password=settings_dict["PASSWORD"] or None,
        host=settings_dict["HOST"] or None,
        port=settings_dict["PORT"] or None,
    )


@pytest.mark.django_db(transaction=True)
def test_write_bench_runs_and_cleans_up(live_server: Any, alice: Caller, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench()
    url = database_url(connection.settings_dict)
    for method in ("executemany", "copy"):
        bench.main(
            [
                "--base", live_server.url, "--key", alice.key, "--database-url", url, "--clients", "2",
                "--entries", "3", "--batches", "2", "--batch-size", "5", "--baseline", method,
            ]
        )  # fmt: skip
    out = capsys.readouterr().out
    assert "single appends, own threads" in out and "batch appends / raw batch inserts" in out
    assert "shared thread's last seq 6 (expected 6)" in out and "errors" not in out
    assert not Thread.objects.filter(external_id__startswith="bench-").exists()
