"""The leftover scan's pass over the files under VAR_DIR: logs, export archives, audit anchors.

Each file is read a chunk at a time (chunks overlap by the longest probe, so a probe across two
chunks is found), decoded as UTF-8 (bytes that are not are replaced), lower-cased and searched for
the probes as the tables are (ids as whole words). A zip (an export archive) is opened and each of
its members searched; a gzip (a rotated log) is read uncompressed. What is not read is listed with
the reason: the database's own files (its rows are scanned as tables), keys, the static files.
A finding names the file (relative to VAR_DIR) and the probes it matched, never what it says.
"""

from __future__ import annotations

import gzip
import os
import re
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Protocol, cast

from django.conf import settings

CHUNK_BYTES = 1 << 20
FILES_LISTED_AT_MOST = 200


class _Probe(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def needle(self) -> str: ...
    @property
    def whole_word(self) -> bool: ...


def _skipped_dirs() -> dict[Path, str]:
    """Directories under VAR_DIR not read, and why."""
    dirs: dict[Path, str] = {}
    for setting, why in (
        ("EMBEDDED_PGDATA", "the database's own files: its rows are scanned as tables"),
        ("MEMORY_KEYSTORE_DIR", "encryption keys"),
        ("STATIC_ROOT", "the service's static files (styles, scripts), written at deploy"),
    ):
        value = getattr(settings, setting, None)
        if value:
            dirs[Path(value).resolve()] = why
    return dirs


_KEY_FILE = re.compile(r"(^secret_key$|\.pem$|\.key$)")


def _patterns(probes: Sequence[_Probe]) -> list[tuple[str, re.Pattern[str] | None]]:
    return [
        (
            p.needle.lower(),
            re.compile(r"(?:^|[^\w@-])" + re.escape(p.needle.lower()) + r"(?:$|[^\w@-])") if p.whole_word else None,
        )
        for p in probes
    ]


def _search(stream: IO[bytes], patterns: list[tuple[str, re.Pattern[str] | None]]) -> set[int]:
    overlap = max((len(n) for n, _ in patterns), default=0) + 2
    found: set[int] = set()
    tail = ""
    while True:
        chunk = stream.read(CHUNK_BYTES)
        if not chunk:
            break
        text = tail + chunk.decode("utf-8", errors="replace").lower()
        for n, (needle, word) in enumerate(patterns, start=1):
            if n not in found and needle in text and (word is None or word.search(text)):
                found.add(n)
        tail = text[-overlap:]
    return found


def _members(path: Path) -> Iterator[tuple[str, IO[bytes]]]:
    """The streams of a file to search: itself, a zip's members, a gzip uncompressed."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    with archive.open(info) as member:
                        yield f"{info.filename}", member
        return
    with path.open("rb") as raw:
        if raw.read(2) == b"\x1f\x8b":
            raw.seek(0)
            with gzip.open(raw) as unpacked:
                yield "", cast(IO[bytes], unpacked)
            return
        raw.seek(0)
        yield "", raw


def files_scan(*, probes: Sequence[_Probe], root: Path | None = None) -> dict[str, Any]:
    """Search the files under VAR_DIR (or `root`) for the probes (module docstring)."""
    base = Path(root or settings.VAR_DIR)
    patterns = _patterns(probes)
    skipped_dirs = _skipped_dirs()
    findings: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    read = found = 0
    if not base.is_dir():
        return {"root": "VAR_DIR", "read": 0, "found": 0, "findings": [], "not_read": []}
    for folder, subdirs, names in os.walk(base):
        here = Path(folder).resolve()
        for sub in list(subdirs):
            why = skipped_dirs.get((here / sub).resolve())
            if why is not None:
                subdirs.remove(sub)
                skipped.append({"path": str((here / sub).relative_to(base.resolve())) + "/", "why": why})
        for name in sorted(names):
            path = here / name
            relative = str(path.relative_to(base.resolve()))
            if _KEY_FILE.search(name):
                skipped.append({"path": relative, "why": "a key (secret key, signing key)"})
                continue
            if not path.is_file():
                continue
            matched: set[int] = set()
            try:
                for _member, stream in _members(path):
                    matched |= _search(stream, patterns)
            except (OSError, zipfile.BadZipFile, EOFError) as error:
                skipped.append({"path": relative, "why": f"could not be read ({type(error).__name__})"})
                continue
            read += 1
            if matched:
                found += 1
                if found <= FILES_LISTED_AT_MOST:
                    findings.append({"file": relative, "probes": [probes[n - 1].name for n in sorted(matched)]})
    return {"root": "VAR_DIR", "read": read, "found": found, "findings": findings, "not_read": skipped}
