"""The literal strings a regular expression cannot match without: a pre-filter that proves, with a
few substring tests run in C, that a text holds no match of a pattern before the pattern runs.

`required_literals(pattern)` reads the pattern's parse tree (the `re` module's own parser) and
answers a set of strings one of which every match of the pattern contains, or None when it cannot
name such a set. Sound by construction, never fitted to a text:

1. A sequence of nodes each matching one of a small finite set of strings (literals, small
   character classes, groups and alternations of those, zero-width `\\b`/`^`) matches one of
   their concatenations: each such run of the pattern is a candidate set.
2. A group, or a repeat of at least one, requires what its body requires; an alternation requires
   the union of what its branches require (nothing when one of them requires nothing).
3. Anything else (a large class, `.`, a negated class, a lookaround, a backreference, a repeat
   that may be empty) requires nothing and is skipped: a candidate is only ever left out.
4. Of the candidate sets of a sequence the one whose shortest string is longest is kept (the
   rarer in text); a string that holds another string of the set is dropped (the shorter one
   is in the text whenever the longer is), so the set stays small.

Case: a case-insensitive pattern's strings are lower-cased and tested against the lower-cased
text, only when both are ASCII (where `re`'s case-insensitive match of an ASCII letter is exactly
its two ASCII cases); a scoped flag group (`(?i:...)`) or a non-ASCII string under IGNORECASE
answers None. `LiteralGate.may_match` therefore says yes for any text the pattern matches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parser  # type: ignore[attr-defined]
from typing import Any

# The most strings a candidate set may hold (a run's concatenations multiply).
MAX_STRINGS = 64
# The most characters a class may hold to count as a set of one-character strings.
MAX_CLASS = 16


def required_literals(pattern: str, flags: int = 0) -> tuple[frozenset[str], bool] | None:
    """(strings, ignore_case): every match of `pattern` under `flags` contains one of `strings`
    (lower-cased when `ignore_case`); None when no such set is known, or the pattern does not
    parse with `re`."""
    try:
        parsed = sre_parser.parse(pattern, flags)
    except (re.error, RecursionError, OverflowError):
        return None
    ignore_case = bool(parsed.state.flags & re.IGNORECASE)
    found = _sequence_required(list(parsed), ignore_case)
    if not found or "" in found:
        return None
    if ignore_case:
        if not all(s.isascii() for s in found):
            return None
        found = {s.lower() for s in found}
    return _minimal(found), ignore_case


@dataclass(frozen=True)
class LiteralGate:
    """A pattern's required strings (`required_literals`), tested against a text."""

    strings: tuple[str, ...]
    ignore_case: bool

    def may_match(self, text: str, lowered: str | None) -> bool:
        """False only when the text holds none of the strings, so the pattern cannot match it.
        `lowered`: `text.lower()` when the text is ASCII, else None (a case-insensitive pattern
        then may match: the test is not made)."""
        if self.ignore_case:
            if lowered is None:
                return True
            text = lowered
        # A plain loop: a generator costs more than the substring tests do.
        for string in self.strings:  # noqa: SIM110
            if string in text:
                return True
        return False


def literal_gate(pattern: re.Pattern[str]) -> LiteralGate | None:
    """The gate of a compiled pattern, None when it has none (the pattern always runs)."""
    found = required_literals(pattern.pattern, pattern.flags)
    if found is None:
        return None
    strings, ignore_case = found
    return LiteralGate(tuple(sorted(strings)), ignore_case)


def _minimal(strings: Iterable[str]) -> frozenset[str]:
    """The strings without those holding another of them."""
    ordered = sorted(set(strings), key=len)
    kept: list[str] = []
    for string in ordered:
        if not any(shorter in string for shorter in kept):
            kept.append(string)
    return frozenset(kept)


def _better(a: set[str] | None, b: set[str]) -> set[str]:
    if a is None:
        return b
    return a if (min(map(len, a)), -len(a)) >= (min(map(len, b)), -len(b)) else b


def _sequence_required(items: list[tuple[Any, Any]], ignore_case: bool) -> set[str] | None:
    """What a sequence of nodes requires (see the module's docstring, steps 1 and 4)."""
    best: set[str] | None = None
    run: set[str] = {""}
    for op, av in items:
        exact = _exact(op, av)
        if exact is not None and len(run) * len(exact) <= MAX_STRINGS:
            run = {a + b for a in run for b in exact}
            continue
        if "" not in run:
            best = _better(best, run)
        run = set(exact) if exact is not None else {""}
        if exact is None:
            inner = _node_required(op, av, ignore_case)
            if inner and "" not in inner:
                best = _better(best, inner)
    if "" not in run:
        best = _better(best, run)
    return best


def _exact(op: Any, av: Any) -> set[str] | None:
    """The finite set of strings a node matches, None when it is not small and known."""
    if op is sre_constants.LITERAL:
        return {chr(av)}
    if op is sre_constants.AT:  # \b, ^, $: zero-width
        return {""}
    if op is sre_constants.IN:
        chars: set[str] = set()
        for inner_op, inner_av in av:
            if inner_op is sre_constants.LITERAL:
                chars.add(chr(inner_av))
            elif inner_op is sre_constants.RANGE and inner_av[1] - inner_av[0] < MAX_CLASS:
                chars.update(chr(c) for c in range(inner_av[0], inner_av[1] + 1))
            else:  # NEGATE, CATEGORY (\d, \w), a wide range
                return None
        return chars if 0 < len(chars) <= MAX_CLASS else None
    if op is sre_constants.SUBPATTERN:
        _group, add_flags, del_flags, body = av
        if add_flags or del_flags:  # a scoped flag group: its case is not the pattern's
            return None
        return _sequence_exact(list(body))
    if op is sre_constants.BRANCH:
        found: set[str] = set()
        for branch in av[1]:
            exact = _sequence_exact(list(branch))
            if exact is None:
                return None
            found |= exact
        return found if len(found) <= MAX_STRINGS else None
    return None


def _sequence_exact(items: list[tuple[Any, Any]]) -> set[str] | None:
    run: set[str] = {""}
    for op, av in items:
        exact = _exact(op, av)
        if exact is None or len(run) * len(exact) > MAX_STRINGS:
            return None
        run = {a + b for a in run for b in exact}
    return run


def _node_required(op: Any, av: Any, ignore_case: bool) -> set[str] | None:
    """What a node that is not a small exact set requires (step 2), None for nothing."""
    if op is sre_constants.SUBPATTERN:
        _group, add_flags, del_flags, body = av
        if add_flags or del_flags:
            return None
        return _sequence_required(list(body), ignore_case)
    if op is sre_constants.BRANCH:
        found: set[str] = set()
        for branch in av[1]:
            inner = _sequence_required(list(branch), ignore_case)
            if not inner or "" in inner:
                return None
            found |= inner
        return found
    if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, _POSSESSIVE_REPEAT):
        low, _high, body = av
        return _sequence_required(list(body), ignore_case) if low >= 1 else None
    if op is _ATOMIC_GROUP:
        return _sequence_required(list(av), ignore_case)
    return None


_POSSESSIVE_REPEAT = getattr(sre_constants, "POSSESSIVE_REPEAT", object())
_ATOMIC_GROUP = getattr(sre_constants, "ATOMIC_GROUP", object())
