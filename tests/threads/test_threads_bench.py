"""The write bench runs end to end against a live server (tiny numbers; it prints, never asserts durations)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest

from memoryapp.models import Thread
from tests.kit import PROJECT_ROOT
from tests.kit.api import Caller
from tests.kit.servers import database_conninfo

BENCH = PROJECT_ROOT / "bench" / "write_entries.py"


def load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("write_entries", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["write_entries"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_write_bench_runs_and_cleans_up(live_server: Any, alice: Caller, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench()
    url = database_conninfo()
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
