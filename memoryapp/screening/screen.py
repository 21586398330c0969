"""The screener the write paths call: looks through each text, applies the agent's policy, and
audits what it decided (category, action, field; never the text).

A write path makes one `Screener` for the write (`screener_for`; None when every category is
allowed, so an agent that screens nothing pays nothing), passes each text or JSON value through
`text` / `value` before it builds its rows, and calls `record` in its transaction once the rows
are written. A refusal raises `SensitiveDataRefused` (422 `sensitive_data`); its transaction
rolls back, so the refusal is audited after it by the error handlers (`refusal_record`).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from governance.audit.chain import AuditEntry, audit_append, audit_append_many
from memoryapp.errors import DomainError
from memoryapp.models import Agent
from memoryapp.screening.batch import JoinedTexts
from memoryapp.screening.people import PeopleMatcher, people_matcher
from memoryapp.screening.policy import ALLOW, HOLD, LABELS, REDACT, REFUSE, policy_effective
from memoryapp.screening.recognizers import (
    CATEGORIES,
    PERSON,
    Finding,
    Memo,
    findings,
    nothing_possible,
    nothing_possible_many,
)

# A record names at most this many decisions (a batch of 1,000 entries may make many).
AUDIT_DECISIONS = 50


class SensitiveDataRefused(DomainError):
    status = 422

    def __init__(self, *, agent_id: int, category: str, field: str, held: bool = False) -> None:
        why = "cannot be held here, so it is refused" if held else "is refused by this agent's screening"
        super().__init__(
            "sensitive_data",
            f"{field} holds {LABELS[category]} ({category}), which {why}.",
            field=field,
        )
        self.agent_id = agent_id
        self.category = category


@dataclass(frozen=True)
class Decision:
    category: str
    action: str
    field: str


def placeholder(category: str) -> str:
    return f"[{category}]"


class Screener:
    def __init__(self, *, agent_id: int, policy: dict[str, str], people: PeopleMatcher | None = None) -> None:
        """`people`: the agent's registered people (memoryapp.screening.people), None when it has
        none or its policy allows the `person` category."""
        self.agent_id = agent_id
        self.policy = policy
        self.categories = [c for c in CATEGORIES if c != PERSON and policy[c] != ALLOW]
        self.memo = Memo()  # what this write's detectors found and worked out
        self.persons = people if policy[PERSON] != ALLOW else None
        self.decisions: dict[Decision, None] = {}  # ordered, without repeats
        # Whether a text screened since the last `take_held` holds something to hold.
        self.held: set[str] = set()

    def take_held(self) -> list[str]:
        """The categories held since the last call (the row being built is to be held for them)."""
        if not self.held:
            return []
        held, self.held = sorted(self.held), set()
        return held

    def text(self, text: str, *, field: str, holdable: bool = True) -> str:
        """The text as it may be stored: spans to redact replaced by their placeholders. Raises
        SensitiveDataRefused for a category refused (or held where `holdable` is False)."""
        if not text:
            return text
        # The ordinary turn: no category's check and no registered person's gate lets it through.
        if (
            text.isascii()
            and nothing_possible(text, self.categories)
            and (self.persons is None or not self.persons.may_hold_ascii(text, self.memo))
        ):
            return text
        found = findings(text, self.categories, self.memo)
        if self.persons is not None:
            found.extend(Finding(PERSON, start, end) for start, end in self.persons.spans(text, self.memo))
        if not found:
            return text
        for finding in found:
            action = self.policy[finding.category]
            if action == REFUSE or (action == HOLD and not holdable):
                raise SensitiveDataRefused(
                    agent_id=self.agent_id, category=finding.category, field=field, held=action == HOLD
                )
        for finding in found:
            action = self.policy[finding.category]
            self.decisions[Decision(finding.category, action, field)] = None
            if action == HOLD:
                self.held.add(finding.category)
        return _redacted(text, [f for f in found if self.policy[f.category] == REDACT])

    def texts_clear(self, texts: Sequence[Any]) -> list[bool]:
        """Of each of a write's texts, whether `text` would give it back as it is and decide nothing
        (the ordinary turn: no category's check and no registered person's gate lets it through),
        told for all of them at once (memoryapp.screening.batch); False for one `text` is to read."""
        joined = JoinedTexts(texts)
        clear = nothing_possible_many(joined, self.categories)
        if self.persons is not None and any(clear):
            let_go = self.persons.lets_go(joined)
            self.memo.let_go.setdefault(self.persons.number, set()).update(itertools.compress(texts, let_go))
            clear = list(map(operator.and_, clear, let_go))
        return clear

    def value(self, value: Any, *, field: str, holdable: bool = True) -> Any:
        """A JSON value with each string in it (keys aside) screened as `text`, under one field name."""
        if value is None:  # most entries' tool calls, event and metadata
            return None
        if isinstance(value, str):
            return self.text(value, field=field, holdable=holdable)
        if isinstance(value, list):
            return [self.value(v, field=field, holdable=holdable) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v, field=field, holdable=holdable) for k, v in value.items()}
        return value

    def record(self, *, actor: str = "", thread_id: str = "", subject: str = "", person: str = "") -> None:
        """Audit this write's decisions (nothing when there were none), in the caller's transaction;
        `person` owns the thread (its id is written as their pseudonym)."""
        entry = self.audit_entry(actor=actor, thread_id=thread_id, subject=subject, person=person)
        if entry is not None:
            audit_append_many([entry])

    def audit_entry(
        self, *, actor: str = "", thread_id: str = "", subject: str = "", person: str = ""
    ) -> AuditEntry | None:
        """The audit record of this write's decisions as `record` appends it (None when there were
        none), for the caller to append (with its write's statement: memoryapp.threads.services
        `_entries_write`); the decisions are taken, so `record` then appends nothing."""
        if not self.decisions:
            return None
        decisions = list(self.decisions)
        self.decisions.clear()
        return AuditEntry(
            action="screening.screened",
            actor=actor,
            agent_id=self.agent_id,
            thread_id=thread_id,
            subject=subject,
            outcome=",".join(sorted({d.action for d in decisions})),
            person=person,
            details={
                "decisions": [
                    {"category": d.category, "action": d.action, "field": d.field} for d in decisions[:AUDIT_DECISIONS]
                ],
                "count": len(decisions),
            },
        )


def _redacted(text: str, found: list[Finding]) -> str:
    """The text with each span replaced by its category's placeholder; overlapping spans merged
    (under the category of the one that starts first)."""
    if not found:
        return text
    merged: list[list[Any]] = []
    for f in sorted(found, key=lambda f: (f.start, -f.end)):
        if merged and f.start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], f.end)
        else:
            merged.append([f.start, f.end, f.category])
    parts: list[str] = []
    at = 0
    for start, end, category in merged:
        parts.append(text[at:start])
        parts.append(placeholder(category))
        at = end
    parts.append(text[at:])
    return "".join(parts)


def screener_for(*, agent: Agent | None = None, agent_id: int | None = None) -> Screener | None:
    """The screener of a write by this agent; None when its policy allows every category. Reads the
    agent's row only when it is not given (the API's writes have it)."""
    if agent is None:
        assert agent_id is not None
        stored, version = Agent.objects.filter(pk=agent_id).values_list("screening", "people_version").first() or (
            None,
            0,
        )
    else:
        stored, version, agent_id = agent.screening, agent.people_version, agent.pk
    policy = policy_effective(stored)
    if all(action == ALLOW for action in policy.values()):
        return None
    people = people_matcher(agent_id=agent_id, version=version) if policy[PERSON] != ALLOW else None
    return Screener(agent_id=agent_id, policy=policy, people=people)


def refusal_record(exc: Exception, *, actor: str = "") -> None:
    """Audit a refusal once its write rolled back (the API's and the MCP server's error handlers)."""
    if not isinstance(exc, SensitiveDataRefused):
        return
    audit_append(
        action="screening.refused",
        actor=actor,
        agent_id=exc.agent_id,
        outcome=REFUSE,
        details={"category": exc.category, "action": REFUSE, "field": exc.field or ""},
    )
