"""Hunting a person's words wherever the service keeps anything: a pg_dump (plain SQL, its COPY
blocks read table by table and row by row), every key and value of the tests' Redis database,
every file under a directory (archives opened), and logs. A needle is looked for as written,
case-folded, JSON-escaped (`\\u00ed`) and URL-quoted, so no encoding hides it."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis
from django.conf import settings

from governance.crypto.fields import json_text_open, value_open
from governance.crypto.sealing import PREFIX as SEALED_PREFIX
from governance.crypto.sealing import SealError


def forms_of(needle: str) -> set[str]:
    """The needle as a haystack may spell it, lower-cased (haystacks are lower-cased too)."""
    forms = {needle, json.dumps(needle)[1:-1], json.dumps(needle, ensure_ascii=False)[1:-1], quote(needle, safe="")}
    return {f.lower() for f in forms if f}


def found_in(text: str, needles: Mapping[str, str]) -> list[str]:
    """The labels of the needles the text holds in any of their forms."""
    folded = text.lower()
    return [label for label, needle in needles.items() if any(form in folded for form in forms_of(needle))]


# --- a pg_dump, table by table ----------------------------------------------------------------------


@dataclass
class DumpRow:
    table: str
    values: dict[str, str | None]

    def text(self) -> str:
        return "\t".join(v for v in self.values.values() if v is not None)


def _copy_unescape(value: str) -> str | None:
    if value == "\\N":
        return None
    out: list[str] = []
    chars = iter(value)
    for c in chars:
        if c != "\\":
            out.append(c)
            continue
        nxt = next(chars, "")
        out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\", "b": "\b", "f": "\f", "v": "\v"}.get(nxt, nxt))
    return "".join(out)


def dump_rows(dump: str) -> Iterator[DumpRow]:
    """Each row of each COPY block of a plain dump, its columns by name (unescaped)."""
    lines = iter(dump.splitlines())
    for line in lines:
        if not line.startswith("COPY ") or " FROM stdin;" not in line:
            continue
        head = line[len("COPY ") : line.index(" FROM stdin;")]
        table = head[: head.index(" (")].split(".")[-1].strip('"')
        columns = [c.strip().strip('"') for c in head[head.index("(") + 1 : head.rindex(")")].split(",")]
        for row in lines:
            if row == "\\.":
                break
            yield DumpRow(table, dict(zip(columns, (_copy_unescape(v) for v in row.split("\t")), strict=True)))


def dump_outside_copy(dump: str) -> str:
    """What a dump says besides its rows (schema, sequences, comments)."""
    kept: list[str] = []
    inside = False
    for line in dump.splitlines():
        if inside:
            inside = line != "\\."
            continue
        if line.startswith("COPY ") and " FROM stdin;" in line:
            inside = True
        kept.append(line)
    return "\n".join(kept)


def sealed_opened(row: DumpRow) -> tuple[dict[str, str], list[str]]:
    """The row's sealed values opened with the keys live now ({column: plaintext}), and the columns
    whose sealed value no live key opens."""
    opened: dict[str, str] = {}
    shut: list[str] = []
    for column, value in row.values.items():
        if value is None:
            continue
        try:
            if value.startswith(SEALED_PREFIX):
                opened[column] = str(value_open(value, table=row.table, column=column))
            elif value.startswith('"' + SEALED_PREFIX):
                opened[column] = str(json_text_open(value, table=row.table, column=column))
        except SealError:
            shut.append(column)
    return opened, shut


def sealed_in(row: DumpRow) -> bool:
    return any(v is not None and SEALED_PREFIX in v for v in row.values.values())


# --- Redis, files, logs ----------------------------------------------------------------------------


def redis_texts() -> dict[str, str]:
    """Every key of the tests' Redis database with its value as text (lists, sets, hashes, streams)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    texts: dict[str, str] = {}
    for raw_key in client.scan_iter(count=1000):
        key = raw_key.decode(errors="replace")
        kind = client.type(raw_key).decode()
        value: Any
        if kind == "string":
            value = client.get(raw_key)
        elif kind == "list":
            value = client.lrange(raw_key, 0, -1)
        elif kind == "set":
            value = client.smembers(raw_key)
        elif kind == "zset":
            value = client.zrange(raw_key, 0, -1)
        elif kind == "hash":
            value = client.hgetall(raw_key)
        elif kind == "stream":
            value = client.xrange(raw_key)
        else:
            value = kind
        texts[key] = repr(value)
    return texts


def _archive_texts(name: str, data: bytes) -> Iterator[tuple[str, bytes]]:
    yield name, data
    if name.endswith(".gz") or data[:2] == b"\x1f\x8b":
        with contextlib.suppress(OSError, EOFError):
            yield from _archive_texts(name + "!", gzip.decompress(data))
    if data[:4] == b"PK\x03\x04":
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                yield from _archive_texts(f"{name}!{member}", archive.read(member))


def files_texts(root: Path, *, skip: Callable[[Path], bool] = lambda p: False) -> dict[str, str]:
    """Every file under `root` (archives opened), as text, by path (relative)."""
    texts: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or skip(path):
            continue
        for name, data in _archive_texts(str(path.relative_to(root)), path.read_bytes()):
            texts[name] = data.decode("utf-8", errors="replace") + "\n" + str(Path(name))
    return texts
