"""Lines of a memory file, and how the tool shows them."""

from __future__ import annotations

import hashlib

LINE_NUMBER_WIDTH = 6


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def size_of(text: str) -> int:
    return len(text.encode("utf-8"))


def split_lines(text: str) -> list[str]:
    """The lines of a file: split on newlines, a final newline ending the last line (not adding one)."""
    if text == "":
        return []
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


def numbered(lines: list[str], first: int = 1) -> str:
    """Lines with their numbers, right-aligned 6 wide, then a tab (the memory tool's view format)."""
    return "\n".join(f"{number:>{LINE_NUMBER_WIDTH}}\t{line}" for number, line in enumerate(lines, start=first))


def human_size(size: int) -> str:
    """A size as the memory tool's directory listing shows it: 512B, 1.5K, 4.0K, 1.2M."""
    if size < 1024:
        return f"{size}B"
    value = float(size)
    for unit in ("K", "M", "G"):
        value /= 1024
        if value < 1024 or unit == "G":
            return f"{value:.1f}{unit}"
    return f"{value:.1f}G"  # pragma: no cover - the loop always returns


def occurrence_lines(text: str, needle: str) -> list[int]:
    """The line of every place `needle` starts in `text`, overlapping ones included."""
    lines: list[int] = []
    start = text.find(needle)
    while start != -1:
        lines.append(text.count("\n", 0, start) + 1)
        start = text.find(needle, start + 1)
    return lines
