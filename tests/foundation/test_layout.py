"""The layout's rules that no contract of import-linter states: checked on the source itself.

import-linter (`lint-imports`, pyproject.toml) keeps the layers and forbids cycles between sibling
packages and modules; these tests add what it leaves out: no cycle between any two files of the
project counting every import (function-local ones too), every advisory lock keyed from
governance.locks, the walk of a branch written in one module only, and Entry's columns derived
from the model matching its table.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from memoryapp.models import Entry
from memoryapp.threads.columns import ENTRY_COLUMNS, ENTRY_INSERT_COLUMNS, ENTRY_TABLE
from tests.kit import PROJECT_ROOT

PACKAGES = ("memoryapp", "governance", "memory_project")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """Every project module `module` imports anywhere in it (top level, functions, TYPE_CHECKING)."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        for name in names:
            target = known(name)
            if target is not None and target != module:
                yield target


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {module: set(_imported(module, path, modules)) for module, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_two_files_import_each_other_even_through_function_local_imports() -> None:
    assert _cycles(_import_graph()) == []


def test_the_cycle_finder_sees_a_cycle_made_by_a_function_local_import() -> None:
    graph = _import_graph()
    graph["memoryapp.threads.selectors"].add("memoryapp.threads.services")
    assert ["memoryapp.threads.selectors", "memoryapp.threads.services"] in _cycles(graph)


def _code_strings(path: Path) -> Iterator[tuple[ast.Call, str]]:
    """Each call whose first argument is a string (or an f-string) of SQL, with that text."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node, first.value


def test_every_advisory_lock_takes_its_key_from_governance_locks() -> None:
    calls = 0
    for path in _modules().values():
        source = path.read_text()
        for call, sql in _code_strings(path):
            if re.search(r"pg_(try_)?advisory_\w*lock", sql):
                calls += 1
                statement = ast.get_source_segment(source, call) or ""
                assert "locks." in statement, f"{path.relative_to(PROJECT_ROOT)}: {statement}"
    assert calls >= 5  # the audit chain, job runs (take, release), embedding, memory files, item slots


def test_the_walk_of_a_branch_is_written_in_one_module() -> None:
    # The recursive step of a walk up the parent pointers: `... JOIN branch b ON p.id = b.parent_id`.
    step = re.compile(r"ON\s+\w+\.id\s*=\s*\w+\.parent_id")
    walks = [str(path.relative_to(PROJECT_ROOT)) for path in _modules().values() if step.search(path.read_text())]
    assert walks == ["memoryapp/threads/branch.py"]


@pytest.mark.django_db
def test_entrys_columns_are_the_tables_columns_but_the_vector_the_tsvector_and_the_blind_indexes() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
            [ENTRY_TABLE],
        )
        in_table = [row[0] for row in cursor.fetchall()]
    # `embedding_bits` is no model field: a trigger writes it from the vector (migration 0063).
    heavy = ["embedding", "embedding_bits", "search_vector", "keyword_hashes", "sender_name_hashes"]
    assert sorted(in_table) == sorted([*ENTRY_COLUMNS, *heavy])
    # The batch COPY reads each column as an attribute of the entry.
    assert all(hasattr(Entry, column) for column in ENTRY_INSERT_COLUMNS)
