"""The consolidation bench runs end to end on a small sample (it prints figures, never asserts durations)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest

from memoryapp.models import Agent, MemoryItem
from tests.kit import PROJECT_ROOT

BENCH = PROJECT_ROOT / "bench" / "consolidate.py"


def load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("consolidate_bench", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["consolidate_bench"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.django_db
def test_the_consolidation_bench_dedupes_and_folds_its_sample_and_cleans_up(capsys: pytest.CaptureFixture[str]) -> None:
    load_bench().main(["--items", "200", "--max-subjects", "5", "--max-changes", "5"])
    out = capsys.readouterr().out
    assert "sample: 200 active items" in out and "service's own time per item" in out
    assert "items marked stale 20" in out  # one repeat in each of the 20 subjects
    assert "lessons folded 20" in out
    assert not Agent.objects.filter(slug__startswith="bench-consolidate-").exists()
    assert not MemoryItem.objects.filter(user_id="u-bench").exists()
