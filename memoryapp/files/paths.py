"""Paths of memory files: what a name may be, and which paths memory keeps for itself.

A path is "/memories" or "/memories/<name>/<name>...": no empty, "." or ".." segment, no
control character (NUL included), no name over 255 characters. Directories are not stored:
a directory is there while a file stands under it.
"""

from __future__ import annotations

from memoryapp.files.errors import MemoryFileError

MEMORY_ROOT = "/memories"
MAX_NAME_CHARS = 255
# The model's path column holds 1024 characters; a longer path cannot be kept.
MAX_PATH_CHARS = 1024
MAX_FILE_BYTES = 1024 * 1024  # 1 MiB a file
MAX_CHANGE_BYTES = 8 * 1024 * 1024  # 8 MiB a change (a renamed directory writes all its files)
MAX_LINES = 999_999

# Files memory writes itself (the playbook, its shadow draft, observations per entity) and the
# context documents (standing instructions, written over their own API: a model must not rewrite
# them): agents view them as usual but change them only through the services that own them.
MEMORY_RESERVED_PATHS: tuple[str, ...] = (
    "/memories/playbook.md",
    "/memories/playbook.next.md",
    "/memories/observations/",
    "/memories/context/",
)


def printable(path: str) -> str:
    """The path as it can be shown back: control characters written as escapes."""
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode() for ch in path)


def path_normalize(path: object, *, field: str = "path") -> str:
    """The canonical form of a memory path (no trailing slash), or a MemoryFileError naming `field`."""
    if not isinstance(path, str) or path == "":
        raise MemoryFileError(
            "invalid_path", f"Error: Parameter `{field}` must be a path under {MEMORY_ROOT}.", field=field
        )
    if "\x00" in path:
        raise MemoryFileError(
            "invalid_path", f"Error: The path {printable(path)} contains a NUL character.", field=field
        )
    if any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in path):
        raise MemoryFileError(
            "invalid_path", f"Error: The path {printable(path)} contains control characters.", field=field
        )
    if path != MEMORY_ROOT and not path.startswith(MEMORY_ROOT + "/"):
        raise MemoryFileError(
            "invalid_path",
            f"Error: The path {path} is outside {MEMORY_ROOT}. Every memory path starts with {MEMORY_ROOT}.",
            field=field,
        )
    canonical = path[:-1] if path.endswith("/") else path  # "/memories/notes/" names the directory
    for name in canonical.split("/")[2:]:
        if name in ("", ".", ".."):
            raise MemoryFileError(
                "invalid_path",
                f"Error: The path {path} is invalid: it must not contain empty, '.' or '..' segments.",
                field=field,
            )
        if len(name) > MAX_NAME_CHARS:
            raise MemoryFileError(
                "name_too_long",
                f"Error: The path {path[:80]}... has a name longer than {MAX_NAME_CHARS} characters.",
                field=field,
            )
    if len(canonical) > MAX_PATH_CHARS:
        raise MemoryFileError(
            "path_too_long",
            f"Error: The path {path[:80]}... is longer than {MAX_PATH_CHARS} characters.",
            field=field,
        )
    return canonical


def path_ancestors(path: str) -> list[str]:
    """The directories above `path`, nearest last, without /memories itself."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(3, len(parts))]


def path_is_under(path: str, directory: str) -> bool:
    return path.startswith(directory + "/")


def path_is_reserved(path: str, reserved: tuple[str, ...]) -> bool:
    """Whether `path` is one of `reserved` or under one (a reserved entry ending in / is a directory)."""
    for kept in reserved:
        directory = kept.rstrip("/")
        if path == directory or path_is_under(path, directory):
            return True
    return False


def path_is_hidden(path: str, below: str) -> bool:
    """Whether a name under `below` starts with a dot or is node_modules (left out of listings)."""
    rest = path[len(below) :].strip("/")
    return any(name.startswith(".") or name == "node_modules" for name in rest.split("/") if name)
