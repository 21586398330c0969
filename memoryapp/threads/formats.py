"""Versions of the JSONL thread format, and the migrators that bring an older file to the current one.

As in 000's session store, every raw record read from a file goes through a pipeline of migrators,
each moving one record forward by one version (`Migrator.upgrade`), before anything reads it. A
file says its version once, in its thread record (`{"type": "thread", "format": N, ...}`):

- 0: a session file of 000 itself: no thread record; nodes {id, parent, turn, createdAt} only,
  in file order (a turn may carry its own `type` and `toolName`).
- 1: this service's exports before formats were numbered: a thread record without `format`;
  nodes with `seq`, `entryType`, `toolName` ... beside 000's fields.
- 2: the thread record says `format: 2` and carries the thread's memory switch (`memory`,
  "on"/"off", and `memory_off`, the seq ranges written while it was off: never extracted).

A file of a version newer than this service knows is refused, naming the line that says so,
rather than read wrongly. Records of a type no version knows are skipped, as 000 skips them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memoryapp.errors import DomainError

FORMAT_VERSION = 2


@dataclass
class Reading:
    """What a migrator may know of the file being read: the line of the record, and its own notes."""

    line: int = 0
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Migrator:
    """Moves one raw record from `from_version` to the next version (000's `Migrator`)."""

    id: str
    from_version: int
    upgrade: Callable[[dict[str, Any], Reading], dict[str, Any]]


def _from_000_session(record: dict[str, Any], reading: Reading) -> dict[str, Any]:
    """0 -> 1: a node of 000's own file gets what this service writes beside 000's fields: its seq
    (its place among the file's nodes, 000 has none), entryType and toolName (from its turn)."""
    if record.get("type") != "node" or not isinstance(record.get("node"), dict):
        return record
    node = dict(record["node"])
    order = reading.notes["nodes"] = int(reading.notes.get("nodes", 0)) + 1
    raw_turn = node.get("turn")
    turn: dict[str, Any] = raw_turn if isinstance(raw_turn, dict) else {}
    node.setdefault("seq", order)
    if not node.get("entryType"):
        node["entryType"] = turn.get("type") or "message"
    if not node.get("toolName") and turn.get("toolName"):
        node["toolName"] = turn["toolName"]
    return {**record, "node": node}


def _memory_switch(record: dict[str, Any], reading: Reading) -> dict[str, Any]:
    """1 -> 2: the thread record carries the memory switch; before it, memory was always on."""
    if record.get("type") != "thread" or not isinstance(record.get("thread"), dict):
        return record
    thread = {"memory": "on", "memory_off": [], **record["thread"]}
    return {**record, "format": 2, "thread": thread}


MIGRATORS: tuple[Migrator, ...] = (
    Migrator(id="000-session-to-1", from_version=0, upgrade=_from_000_session),
    Migrator(id="1-to-2-memory-switch", from_version=1, upgrade=_memory_switch),
)


def file_format(records: list[tuple[int, dict[str, Any]]]) -> int:
    """The version of a file: its (first) thread record's `format`, 1 when it has none, and 0 for a
    file without a thread record (000's own). A version this service does not know is a 400
    naming the line that says it."""
    for line, record in records:
        if record.get("type") != "thread":
            continue
        # Its format is read whatever shape the rest has: a newer file may shape it otherwise, and
        # must be refused, not read as a 000 file.
        if "format" in record:
            _format_check(record["format"], line)
        if not isinstance(record.get("thread"), dict):
            raise DomainError(
                "invalid_record", f"Line {line}: a thread record's thread is an object.", field=f"line {line}.thread"
            )
        if "format" not in record:
            return 1
        return int(record["format"])
    return 0


def _format_check(version: Any, line: int) -> None:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise DomainError(
            "invalid_value", f"Line {line}: format must be a whole number (0 or more).", field=f"line {line}.format"
        )
    if version > FORMAT_VERSION:
        raise DomainError(
            "unsupported_format",
            f"Line {line} says format {version}; this service reads JSONL formats 0 to {FORMAT_VERSION}. "
            "Import it into a newer version of the service.",
            field=f"line {line}.format",
        )


def records_upgraded(records: list[tuple[int, dict[str, Any]]]) -> tuple[int, list[tuple[int, dict[str, Any]]]]:
    """(the file's version, its records brought to FORMAT_VERSION), each through the chain of
    migrators from the file's version on, in file order."""
    version = file_format(records)
    chain = [m for m in MIGRATORS if m.from_version >= version]
    reading = Reading()
    upgraded = []
    for line, record in records:
        reading.line = line
        for migrator in chain:
            record = migrator.upgrade(record, reading)
        upgraded.append((line, record))
    return version, upgraded
