"""The review queue's quoted file lines (memoryapp.admin.review._file_quoted): a long range shows its
first and last lines with a count of those between, also when the range runs past the file's end."""

from __future__ import annotations

from types import SimpleNamespace

from memoryapp.admin.review import RANGE_LINES_SHOWN, _file_quoted
from memoryapp.models.choices import EvidenceStatus


def _quoted(lines: int, start: int, end: int) -> list[tuple[int, bool, int]]:
    version = SimpleNamespace(
        redacted_at=None,
        content="\n".join(f"line {n}" for n in range(1, lines + 1)),
        agent_id=1,
        user_id="",
        project_id="",
        thread_id="",
        path="/notes.md",
    )
    quote = SimpleNamespace(
        file_version=version, line_start=start, line_end=end, quote="q", status=EvidenceStatus.VERIFIED
    )
    shown = _file_quoted([quote])  # type: ignore[list-item]
    return [(line.number, line.quoted, line.folded_before) for line in shown.lines]


def test_a_long_range_shows_its_ends_and_counts_the_lines_between() -> None:
    lines = _quoted(300, 11, 260)
    numbers = [n for n, _, _ in lines]
    assert numbers == [9, 10, 11, 12, 13, 14, 15, 256, 257, 258, 259, 260, 261, 262]
    assert [folded for _, _, folded in lines if folded] == [240]
    assert sum(1 for _, quoted, _ in lines if quoted) == RANGE_LINES_SHOWN


def test_a_long_range_past_the_files_end_shows_the_files_last_lines() -> None:
    # The file has 100 lines; the quote names 90 to 300: its last lines shown are the file's.
    lines = _quoted(100, 90, 300)
    numbers = [n for n, _, _ in lines]
    assert numbers[-1] == 100
    # Lines 90-100 quoted (11, more than RANGE_LINES_SHOWN): 2 of context, the first 5, the last 5.
    assert numbers == [88, 89, 90, 91, 92, 93, 94, 96, 97, 98, 99, 100]
    assert [folded for _, _, folded in lines if folded] == [1]
