"""The personalized PageRank walk gives the same ranks, to the last bit, and the same order whatever
the process's hash seed: its graph is sets of string node names, whose iteration order changes with
PYTHONHASHSEED, and float sums taken in a different order differ in their last bits (equal masses
then sort differently)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A made-up graph with hubs (many neighbours each, so a node's mass is a sum of many shares) and
# symmetric parts (equal masses that only the tie-break orders): entities, items and turns.
PROGRAM = r"""
import django
django.setup()
from collections import defaultdict
from memoryapp.search.graph_channels import _ranked, personalized_pagerank

adjacency = defaultdict(set)
def link(a, b):
    adjacency[a].add(b)
    adjacency[b].add(a)
for n in range(12):
    for i in range(n, 60, 3 + n % 5):
        link(f"n:ent-{n:02d}", f"i:item-{i:03d}")
        link(f"i:item-{i:03d}", f"e:turn-{(i * 7 + n) % 90:03d}")
    link(f"n:ent-{n:02d}", f"n:ent-{(n * 5 + 1) % 12:02d}")
for t in range(90):
    link(f"e:turn-{t:03d}", f"n:ent-{t % 12:02d}")
seeds = {"n:ent-03": 1.0, "n:ent-07": 1.0, "i:item-011": 0.5, "i:item-042": 0.25}
walk = personalized_pagerank(dict(adjacency), seeds)
for prefix in ("n:", "i:", "e:"):
    for node, mass in _ranked(walk, prefix):
        print(prefix, node, mass.hex())
"""


def _run(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed, "DJANGO_SETTINGS_MODULE": "memory_project.settings"}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_walk_is_the_same_under_two_hash_seeds() -> None:
    first, second = _run("1"), _run("2")
    assert first.count("\n") > 100
    assert first == second
