"""Mentions found at write time (issue 25 §2): the cheap detector the write paths call, in their
transaction, so the subject index knows a row names a registered person from the moment it is
stored, not only from the next rebuild.

What is looked at: the texts of each row as the index's scan reads them (`row_texts`: an entry's
content, tool calls, event, metadata and sender name; a thread's metadata; an item's or a fact's
subject, attribute, value and metadata; an entity's name and aliases; a quote; a memory file or
context document version), written by an agent over the API, the MCP server, an import or a job
(extraction's items, compaction's summaries, fork copies).

What is looked for: the identifiers the agent registered for any of its people, matched as the
registry and screening match them (`identifier_candidates`: an e-mail lower-cased, a phone in
E.164, a name case- and accent-folded, an external id as a token), so a row is recorded here
exactly when `subject_index_rebuild` would record it for that person.

Cost (`bench/subjects.py`):

1. An agent that never registered anyone (`Agent.people_version == 0`, read with the agent's row
   every write has) pays one comparison.
2. Otherwise the agent's `PeopleMatcher` is built once per process and registry version (every
   identifier of the agent read and opened once) and kept; a change of identifiers bumps the
   version, and the next write anywhere builds it again.
3. A text is first gated: its folded words against one word of each identifier (its longest), and
   its digits against each phone's last seven; an ordinary turn costs a `lower()`, one regex
   `findall` and a set test. Only a text that passes is parsed into candidates and compared by key.
4. What matched is inserted in one statement (`ON CONFLICT DO NOTHING`); nothing matched, no query.

The rest stays with the rebuild job: rows written before a person was registered or whose
identifiers changed (`subject_index_schedule` after a PUT), identifiers given only with an erasure
request, staff edits, job records, and rows about an entity linked to a person.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from memoryapp.models import Agent, IdentifierKind, PersonIdentifier, SubjectMention
from memoryapp.models.people import identifier_key
from memoryapp.screening.identifiers import identifier_candidates, name_folded
from memoryapp.subjects.index import row_texts
from memoryapp.subjects.matching import strings_of

_WORD = re.compile(r"\w+", re.UNICODE)
_PHONE_TAIL = 7
# The agents whose matchers a process keeps (a worker serving more agents builds the rest again).
MAX_AGENTS_KEPT = 512

# A row to look at: its table in the index (SubjectMention.Table), its primary key, and the row.
Written = tuple[str, Any, Any]


class PeopleMatcher:
    """Every registered person of one agent, as one matcher (see the module's docstring)."""

    def __init__(self, identifiers: Iterable[tuple[str, str, str]]) -> None:
        """`identifiers`: (user id, kind, normalised value) of each registered identifier."""
        self.people: dict[str, set[str]] = {}  # `kind:value` -> the people it identifies
        self._words: set[str] = set()  # one folded word of each identifier but phones
        self._bare: set[str] = set()  # an identifier without a word (punctuation only), folded
        self._tails: set[str] = set()  # the last digits of each phone
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

    def __bool__(self) -> bool:
        return bool(self.people)

    def _may_hold(self, text: str) -> bool:
        folded = _folded(text)
        if not self._words.isdisjoint(_WORD.findall(folded)):
            return True
        if self._bare and any(bare in folded for bare in self._bare):
            return True
        if self._tails and sum(c.isdigit() for c in text) >= _PHONE_TAIL:
            digits = "".join(c for c in text if c.isdigit())
            tails = self._tails
            return any(digits[i : i + _PHONE_TAIL] in tails for i in range(len(digits) - _PHONE_TAIL + 1))
        return False

    def people_in(self, texts: Sequence[Any]) -> set[str]:
        """The people any string of these texts (strings and JSON values, keys aside) names."""
        found: set[str] = set()
        for text in strings_of(list(texts)):
            if not text or not self._may_hold(text):
                continue
            for key in identifier_candidates(text):
                named = self.people.get(key)
                if named:
                    found |= named
        return found


def _folded(text: str) -> str:
    return text.lower() if text.isascii() else name_folded(text)


_kept: dict[int, tuple[int, PeopleMatcher | None]] = {}


def people_matcher(*, agent: Agent | None = None, agent_id: int | None = None) -> PeopleMatcher | None:
    """The matcher of the agent's registered people, None when it has none. Reads the agent's
    registry version only when the agent is not given (the API's writes have it)."""
    if agent is None:
        assert agent_id is not None
        version = Agent.objects.filter(pk=agent_id).values_list("people_version", flat=True).first() or 0
    else:
        version, agent_id = agent.people_version, agent.pk
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


def mentions_record(
    *, agent: Agent | None = None, agent_id: int | None = None, rows: Iterable[Written], replace: bool = False
) -> int:
    """Record in the subject index which registered people these rows (just written, in the
    caller's transaction) name; answers how many (row, person) pairs were found.

    `replace`: the rows were rewritten (a thread's metadata), so what the index held for them goes
    first. Only when the agent registered someone: otherwise no query at all."""
    matcher = people_matcher(agent=agent, agent_id=agent_id)
    if matcher is None:
        return 0
    agent_id = agent.pk if agent is not None else agent_id
    assert agent_id is not None
    mentions: list[SubjectMention] = []
    written: dict[str, list[str]] = {}
    for table, pk, row in rows:
        written.setdefault(table, []).append(str(pk))
        for user_id in sorted(matcher.people_in(row_texts(table, row))):
            mentions.append(SubjectMention(agent_id=agent_id, user_id=user_id, table=table, row_id=str(pk)))
    if replace:
        for table, ids in written.items():
            SubjectMention.objects.filter(agent_id=agent_id, table=table, row_id__in=ids).delete()
    if mentions:
        SubjectMention.objects.bulk_create(mentions, ignore_conflicts=True)
    return len(mentions)
