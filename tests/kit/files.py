"""Memory files as the model reads them."""

from __future__ import annotations

import hashlib

from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.protocol import file_view


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def text_seen(access: FileAccess, path: str) -> str | None:
    """The text `view` shows of the file at `path` (its lines, numbers taken off), or None where
    no file stands: nothing there, or a directory."""
    try:
        answer = file_view(access=access, path=path)
    except MemoryFileError as error:
        assert error.code == "path_not_found", error
        return None
    if answer.details["kind"] != "file":
        return None
    return "\n".join(line.split("\t", 1)[1] for line in answer.result.splitlines()[1:])
