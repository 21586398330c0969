"""Every registered person of one agent as one matcher, built once per process and registry
version: what screening's `person` category looks for in a write (memoryapp.screening.screen) and
what the write-time mention detector records (memoryapp.subjects.detect). One matcher, so a text
names a person for screening exactly when it does for the subject index.

Cost:

1. An agent that never registered anyone (`Agent.people_version == 0`, read with the agent's row
   every write has) pays one comparison.
2. Otherwise the agent's `PeopleMatcher` is built once per process and registry version (every
   identifier of the agent read and opened once) and kept; a change of identifiers bumps the
   version (`identifiers_set`, `identifiers_delete`), and the next write anywhere builds it again.
3. A text is first gated: its folded words against one word of each identifier (its longest), and
   its digits against each phone's last seven; an ordinary turn costs a `lower()`, one regex
   `findall` and a set test. Only a text that passes is parsed into candidates
   (`identifier_candidates`) and compared by key. No query per write: screening used to hash every
   name n-gram of a batch and look the hashes up in the blind index, a few thousand keys a batch.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from memoryapp.models import Agent, IdentifierKind, PersonIdentifier
from memoryapp.models.people import identifier_key
from memoryapp.screening.batch import JoinedTexts
from memoryapp.screening.identifiers import identifier_candidates, name_folded
from memoryapp.screening.recognizers import Memo, span_back, text_readings

_WORD = re.compile(r"\w+", re.UNICODE)
_PHONE_TAIL = 7
# The agents whose matchers a process keeps (a worker serving more agents builds the rest again).
MAX_AGENTS_KEPT = 512
# A number of each matcher built, naming its answers in a write's memo (`Memo.gated`).
_MATCHERS = itertools.count()


class PeopleMatcher:
    """Every registered person of one agent, as one matcher (see the module's docstring)."""

    def __init__(self, identifiers: Iterable[tuple[str, str, str]]) -> None:
        """`identifiers`: (user id, kind, normalised value) of each registered identifier."""
        self.people: dict[str, set[str]] = {}  # `kind:value` -> the people it identifies
        self._words: set[str] = set()  # one folded word of each identifier but phones
        self._bare: set[str] = set()  # an identifier without a word (punctuation only), folded
        self._tails: set[str] = set()  # the last digits of each phone
        self._number = next(_MATCHERS)
        for user_id, kind, value in identifiers:
            self.people.setdefault(identifier_key(kind, value), set()).add(user_id)
            if kind == IdentifierKind.PHONE:
                self._tails.add("".join(c for c in value if c.isdigit())[-_PHONE_TAIL:])
                continue
            words = _WORD.findall(_folded(value))
            if words:
                # The longest word of it: a text naming the identifier holds each of its words whole
                # (names are runs of words; e-mails and ids are bounded by non-word characters), and
                # the longest is the least common.
                self._words.add(max(words, key=len))
            else:
                self._bare.add(_folded(value))

        # The gate's words as one pattern (a trie: `number(?:1|2)`), compiled once per registry
        # version: one search in C, where splitting every text into its words cost twice as much.
        self._gate = _WordsGate(self._words) if self._words else None

    def __bool__(self) -> bool:
        return bool(self.people)

    def _may_hold(self, text: str) -> bool:
        folded = _folded(text)
        # A word of the text that is one of the gate's words (each is a run of word characters).
        if self._gate is not None and self._gate.search(folded) is not None:
            return True
        if self._bare and any(bare in folded for bare in self._bare):
            return True
        if self._tails and sum(c.isdigit() for c in text) >= _PHONE_TAIL:
            digits = "".join(c for c in text if c.isdigit())
            tails = self._tails
            return any(digits[i : i + _PHONE_TAIL] in tails for i in range(len(digits) - _PHONE_TAIL + 1))
        return False

    def may_hold_ascii(self, text: str, memo: Memo | None) -> bool:
        """Whether `spans` may find anything in an ASCII text (read as it is, once): its gate."""
        return self._may_hold_known(text, memo)

    def _may_hold_known(self, text: str, memo: Memo | None) -> bool:
        """`_may_hold`, kept in the write's `memo`: screening asks it of a text, and the subject index
        of the same text again once it is screened (unchanged unless something was redacted)."""
        if memo is None:
            return self._may_hold(text)
        key = (self._number, text)
        known = memo.gated.get(key)
        if known is None:
            known = memo.gated[key] = self._may_hold(text)
        return known

    def lets_go(self, joined: JoinedTexts) -> list[bool]:
        """Of each text of a write, whether the gate (`_may_hold`) lets it go, worked out at once over
        the texts joined (memoryapp.screening.batch): True only where it does; False for one to be
        read alone (not ASCII, or where a gate's word or bare identifier is, or any digit where a
        phone's last seven might be)."""
        flagged = joined.matching(self._gate) if self._gate is not None else []
        for bare in self._bare:
            flagged += joined.holding(bare)
        if self._tails:
            flagged += joined.holding(b"#", joined.classes())
        return joined.let_go(flagged)

    @property
    def number(self) -> int:
        """This matcher's number, naming its answers in a write's memo."""
        return self._number

    def rows_may_name(self, rows: Sequence[Sequence[Any]], memo: Memo | None = None) -> list[bool]:
        """Of each row's texts (strings and JSON values, as `people_in` takes them), whether one of
        their strings passes the gate (`lets_go`, over every string of the rows at once): a row
        that answers False names no one (`people_in` would find nobody). `memo`: the write's
        screener's, whose batch let some of the strings go already (`Memo.let_go`)."""
        known = memo.let_go.get(self._number, set()) if memo is not None else set()
        strings: list[str] = []
        owners: list[int] = []
        for n, texts in enumerate(rows):
            for value in texts:
                if isinstance(value, str):
                    if value in known:
                        continue
                    strings.append(value)
                    owners.append(n)
                elif value:
                    for string in strings_of(value):
                        strings.append(string)
                        owners.append(n)
        maybe = [False] * len(rows)
        for owner, gone in zip(owners, self.lets_go(JoinedTexts(strings)), strict=True):
            if not gone:
                maybe[owner] = True
        return maybe

    def spans(self, text: str, memo: Memo | None = None) -> list[tuple[int, int]]:
        """Where the text names a registered person (start, end), in no particular order, over each of
        its readings (digits of any script, invisible characters left out: `text_readings`). `memo`:
        the write's detector results (screening ran its e-mail and phone detectors on the text)."""
        if not text:
            return []
        found = [
            span_back(start, end, kept)
            for read, kept in text_readings(text)
            if self._may_hold_known(read, memo)
            for key, spans in identifier_candidates(read, memo).items()
            if key in self.people
            for start, end in spans
            if end > start
        ]
        return list(dict.fromkeys(found))

    def people_in(self, texts: Sequence[Any], memo: Memo | None = None) -> set[str]:
        """The people any string of these texts (strings and JSON values, keys aside) names, over each
        string's readings (`text_readings`). `memo`: the write's screener's, when it screened them."""
        found: set[str] = set()
        for text in strings_of(list(texts)):
            if not text:
                continue
            for read, _kept in text_readings(text):
                if not self._may_hold_known(read, memo):
                    continue
                for key in identifier_candidates(read, memo):
                    named = self.people.get(key)
                    if named:
                        found |= named
        return found


class _WordsGate:
    """Where one of some words (each a run of word characters) stands whole in a text: the search of
    `\b(?:words)\b`, made as `(?:words)\b` and the word boundary before a match checked after it.
    A pattern opening with `\b` is tried at every place of the text, where one opening with the
    words' first letters is looked for by them in C: the gate of 50 people over a batch of 100
    turns (bench/screening.py) 126 against 40 us, and a write asks it twice (screening, the subject
    index).

    The same matches: a match of `(?:words)\b` holds word characters only, so it opens on a word
    boundary exactly when the character before it is not a word character (or it opens the text);
    one that does not is passed over, and no whole word starts inside it (each of its characters
    after the first follows a word character), so the search goes on from its next character."""

    __slots__ = ("pattern",)

    def __init__(self, words: Iterable[str]) -> None:
        self.pattern = re.compile(rf"(?:{_trie(words)})\b")

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        match = self.pattern.search(text, pos)
        while match is not None:
            start = match.start()
            if start == 0 or _WORD_CHAR.match(text, start - 1) is None:
                return match
            match = self.pattern.search(text, start + 1)
        return None


_WORD_CHAR = re.compile(r"\w", re.UNICODE)


def _trie(words: Iterable[str]) -> str:
    """An alternation matching exactly these words (none empty), their common prefixes factored out,
    so the regex engine reads a text once rather than trying each word at each place."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def pattern(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + pattern(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 and "" not in node else f"(?:{'|'.join(branches)})"
        return f"{body}?" if "" in node else body

    return pattern(root)


def strings_of(value: Any) -> Iterator[str]:
    """Every string of a JSON value (keys aside)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for inner in value:
            yield from strings_of(inner)
    elif isinstance(value, dict):
        for inner in value.values():
            yield from strings_of(inner)


def _folded(text: str) -> str:
    return text.lower() if text.isascii() else name_folded(text)


_kept: dict[int, tuple[int, PeopleMatcher | None]] = {}


def people_matcher(
    *, agent: Agent | None = None, agent_id: int | None = None, version: int | None = None
) -> PeopleMatcher | None:
    """The matcher of the agent's registered people, None when it has none. Reads the agent's
    registry version only when neither the agent nor its `version` is given (the API's writes
    have the agent's row)."""
    if agent is not None:
        version, agent_id = agent.people_version, agent.pk
    elif version is None:
        assert agent_id is not None
        version = Agent.objects.filter(pk=agent_id).values_list("people_version", flat=True).first() or 0
    assert agent_id is not None
    if not version:
        return None
    kept = _kept.get(agent_id)
    if kept is not None and kept[0] == version:
        return kept[1]
    # Opened under each person's data key: the values are sealed at rest.
    rows = PersonIdentifier.objects.filter(agent_id=agent_id).values_list("user_id", "kind", "value")
    matcher = PeopleMatcher(rows)
    if len(_kept) >= MAX_AGENTS_KEPT:
        _kept.clear()
    _kept[agent_id] = (version, matcher if matcher else None)
    return _kept[agent_id][1]
