"""One person's identifiers as a matcher: where a text names them, and the text with every such
span replaced by the placeholder. The keys are those of the registry (`identifier_key`: kind and
normalised value), so a text names a person here exactly when screening would find them there."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from memoryapp.models import IdentifierKind
from memoryapp.models.people import identifier_key
from memoryapp.screening.identifiers import LISTS, identifier_candidates, name_folded
from memoryapp.screening.people import strings_of
from memoryapp.screening.recognizers import span_back, text_readings

# What stands where a person was named, once they are erased.
PLACEHOLDER = "[erased person]"

_DIGITS = re.compile(r"\d")


class PersonMatcher:
    """Finds one person's identifiers in texts (see the module's docstring).

    `identifiers`: the four lists of the registry, normalised (`identifiers_check`, `identifiers_of`).
    A cheap gate first (a registered e-mail, a name's first word, a phone's last digits, an
    external id, as plain substrings of the folded text), so most rows cost a `lower()` and a few
    `in` tests; only a text that passes it is parsed into candidates.
    """

    def __init__(self, *, user_id: str, identifiers: Mapping[str, Sequence[str]]) -> None:
        self.user_id = user_id
        self.identifiers = {name: list(values) for name, values in identifiers.items()}
        self.keys: set[str] = set()
        self._needles: set[str] = set()  # e-mails and external ids, lower-cased
        self._name_needles: set[str] = set()  # the first word of each name, folded
        self._phone_tails: set[str] = set()
        for name, values in identifiers.items():
            kind = LISTS[name]
            for value in values:
                self.keys.add(identifier_key(kind, value))
                if kind == IdentifierKind.PHONE:
                    self._phone_tails.add("".join(_DIGITS.findall(value))[-7:])
                elif kind == IdentifierKind.NAME:
                    self._name_needles.add(value.split()[0])
                else:
                    self._needles.add(value.lower())

    def __bool__(self) -> bool:
        return bool(self.keys)

    def _may_hold(self, text: str) -> bool:
        lower = text.lower()
        if any(needle in lower for needle in self._needles):
            return True
        if self._name_needles:
            folded = lower if text.isascii() else name_folded(text)
            if any(needle in folded for needle in self._name_needles):
                return True
        if self._phone_tails and sum(c.isdigit() for c in text) >= 7:
            digits = "".join(_DIGITS.findall(text))
            return any(tail in digits for tail in self._phone_tails)
        return False

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the text names the person (start, end), in text order."""
        if not self.keys or not text:
            return []
        # Over each of the text's readings, as screening reads it (digits of any script and
        # compatibility forms as ASCII, invisible characters left out: `text_readings`): her e-mail
        # typed `ines﹫example.com` or with a zero-width space inside is hers to the index at write,
        # and must be here too, or the erasure finds the row and leaves the mention in it.
        found = {
            span_back(start, end, kept)
            for read, kept in text_readings(text)
            if self._may_hold(read)
            for key, spans in identifier_candidates(read).items()
            if key in self.keys
            for start, end in spans
            if end > start
        }
        return sorted(found)

    def holds(self, value: Any) -> bool:
        """Whether any string of this JSON value (keys aside) names the person."""
        return any(self.spans(text) for text in strings_of(value))

    def excerpts(self, value: Any, *, around: int = 60) -> list[str]:
        """Each place a JSON value's strings name the person, with `around` characters either side:
        what an export of the person shows of a row that is another's (the mention, not the row)."""
        found: list[str] = []
        for text in strings_of(value):
            for start, end in self.spans(text):
                head, tail = max(0, start - around), min(len(text), end + around)
                found.append(("…" if head else "") + text[head:tail] + ("…" if tail < len(text) else ""))
        return found

    def redacted(self, text: str) -> str:
        """The text with every span naming the person replaced by the placeholder (overlaps merged)."""
        spans = self.spans(text)
        if not spans:
            return text
        merged: list[list[int]] = []
        for start, end in spans:
            if merged and start < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        parts: list[str] = []
        at = 0
        for start, end in merged:
            parts += [text[at:start], PLACEHOLDER]
            at = end
        parts.append(text[at:])
        return "".join(parts)

    def redacted_value(self, value: Any) -> Any:
        """A JSON value with each string in it (keys aside) `redacted`."""
        if isinstance(value, str):
            return self.redacted(value)
        if isinstance(value, list):
            return [self.redacted_value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.redacted_value(v) for k, v in value.items()}
        return value
