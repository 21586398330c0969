"""The ordinary turns of a batch told apart at once (issue 25 §3, bench/screening.py): what screening's
shortcut (`recognizers.nothing_possible`) and the people gate (`people.PeopleMatcher.may_hold_ascii`)
decide of each text of a write, worked out over the write's ASCII texts joined into one string,
with a few scans of the whole in C (`bytes.translate`, `str.find`, the gate's regex), rather than a
dozen tests and as many Python calls a text. A batch of 100 ordinary turns paid some 5 us a turn
for them (and as much again around them), a fifth of what the whole append costs.

Sound, not exact: a text is let go here only when the per-text tests would let it go too (each
test below finds a superset of what theirs find); a text one of them flags is read as before,
alone. The texts are joined by a newline, which is whitespace and no word character: no token,
word, keyword or `\\b` the tests look for spans two texts.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

_SEPARATOR = "\n"
_ELEVEN = b"x" * 11

# Each ASCII byte as its class: `#` a digit or `@`, a space for whitespace (as `str.split` reads it),
# `x` anything else.
_CLASSES = bytes(
    ord("#") if chr(b) in "0123456789@" else ord(" ") if chr(b).isspace() else ord("x") for b in range(256)
)
# And as a word's: a space for whitespace, `x` anything else. A run of 11 `x` is a word of 11
# characters or more (of `str.split`).
_WORD_CLASSES = bytes(ord(" ") if chr(b).isspace() else ord("x") for b in range(256))


class JoinedTexts:
    """The ASCII strings among a write's texts, lower-cased and joined, with where each ends; the
    others (not a string, not ASCII) are never let go (`nothing_possible` sends on every text that is
    not ASCII)."""

    def __init__(self, texts: Sequence[Any]) -> None:
        self.count = len(texts)
        # Which of `texts` are joined (in order), and the position just past each one's separator.
        self.joined = [i for i, text in enumerate(texts) if isinstance(text, str) and text.isascii()]
        self.texts: list[str] = [texts[i] for i in self.joined]
        self.lowered = _SEPARATOR.join(self.texts).lower()
        self.ends = list(itertools.accumulate(len(text) + 1 for text in self.texts))
        self._classes: bytes | None = None

    def classes(self) -> bytes:
        """The joined text's bytes as their classes (`_CLASSES`), made once."""
        if self._classes is None:
            self._classes = self.lowered.encode("ascii").translate(_CLASSES)
        return self._classes

    def holding(self, needle: Any, haystack: Any = None) -> list[int]:
        """The joined texts (their positions in `self.texts`) holding `needle` (a string of the
        lowered text, or a byte string of `haystack`): one `find` for each such text."""
        haystack = self.lowered if haystack is None else haystack
        found: list[int] = []
        at = haystack.find(needle)
        while at >= 0:
            k = bisect_right(self.ends, at)
            found.append(k)
            at = haystack.find(needle, self.ends[k])
        return found

    def matching(self, pattern: Any) -> list[int]:
        """The joined texts in which a compiled pattern (of the lowered text) matches, searched
        from the start of the text after each one found."""
        found: list[int] = []
        match = pattern.search(self.lowered)
        while match is not None:
            k = bisect_right(self.ends, match.start())
            found.append(k)
            if k + 1 >= len(self.ends):
                break
            match = pattern.search(self.lowered, self.ends[k])
        return found

    def let_go(self, flagged: Iterable[int]) -> list[bool]:
        """Of each of the write's texts, whether it is let go: joined and not among `flagged` (their
        positions in `self.texts`)."""
        quiet = [True] * len(self.texts)
        for k in flagged:
            quiet[k] = False
        if len(self.joined) == self.count:  # every text joined (the usual batch: ASCII strings)
            return quiet
        answer = [False] * self.count
        for k, i in enumerate(self.joined):
            answer[i] = quiet[k]
        return answer

    def long_words(self) -> Iterator[tuple[int, str]]:
        """Each word (`str.split`'s) of 11 characters or more of the joined texts (a run of 11 `x` of
        the words' classes or more), lower-cased, with the position of its text in `self.texts`;
        found with `bytes.find`, as `holding` finds (a regex over the classes tried every position).
        The separator is whitespace: no word spans two texts."""
        classes = self.lowered.encode("ascii").translate(_WORD_CLASSES)
        at = classes.find(_ELEVEN)
        while at >= 0:
            end = classes.find(b" ", at)
            end = len(classes) if end < 0 else end
            yield bisect_right(self.ends, at), self.lowered[at:end]
            at = classes.find(_ELEVEN, end)
