"""The error of a refused memory command: its message is the text the model reads."""

from __future__ import annotations

from memoryapp.errors import DomainError


class MemoryFileError(DomainError):
    """A command the memory files refuse; `message` is the tool result a model should see.

    The API answers it with the usual error shape and, beside it, `result` = the message, so a
    client can pass the answer through to the model as the tool result.
    """

    def __init__(self, code: str, message: str, *, field: str | None = None, status: int = 400):
        super().__init__(code, message, field=field, status=status)


def not_found(path: str, *, field: str = "path", prefix: str = "Error: ", hint: bool = False) -> MemoryFileError:
    """The memory tool's "does not exist" answer, worded per command as its documentation does.

    view: no prefix, with the hint; str_replace: prefix and hint; insert, delete, rename: prefix only.
    """
    message = f"{prefix}The path {path} does not exist"
    message += ". Please provide a valid path." if hint else ""
    return MemoryFileError("path_not_found", message, field=field, status=404)


def changed_since_read(path: str) -> MemoryFileError:
    return MemoryFileError(
        "file_changed",
        f"Error: {path} changed since you last read it. View it again and try again.",
        field="expected_sha256",
        status=409,
    )


def concurrent_change(path: str) -> MemoryFileError:
    return MemoryFileError(
        "memory_file_conflict",
        f"Another writer changed the memory around {path} at the same time. View it again and try again.",
        status=409,
    )
