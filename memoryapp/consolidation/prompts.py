"""The prompts of consolidation: their versions (templates in memoryapp/prompts/) and the messages
that show the model its data. Every text shown comes from memory, so it is marked as data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

DEDUPE = "dedupe_v1"
FOLD = "fold_v1"
OBSERVATIONS = "observations_v1"
BRIEF = "brief_v1"


def one_line(text: str, limit: int = 600) -> str:
    """The text on one line, cut at `limit` characters: a value never breaks the layout it is shown in."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def day(at: datetime | None) -> str:
    return at.date().isoformat() if at else "undated"


@dataclass(frozen=True)
class ShownItem:
    item_id: str
    kind: str
    attribute: str
    value: str
    said_at: datetime
    trust: str


@dataclass(frozen=True)
class ShownSubject:
    name: str
    aliases: Sequence[str]
    items: Sequence[ShownItem]


def dedupe_message(subjects: Sequence[ShownSubject]) -> str:
    blocks = []
    for number, subject in enumerate(subjects, start=1):
        also = f" (also called: {', '.join(one_line(a, 80) for a in subject.aliases)})" if subject.aliases else ""
        lines = [f"Subject {number}: {one_line(subject.name, 120)}{also}"]
        lines += [
            f"[{i.item_id}] {i.kind}, {one_line(i.attribute, 120)}: {one_line(i.value)} (said {day(i.said_at)}, {i.trust})"
            for i in subject.items
        ]
        blocks.append("\n".join(lines))
    return "Subjects and their items (data):\n\n" + "\n\n".join(blocks)


@dataclass(frozen=True)
class ShownLesson:
    item_id: str
    text: str
    at: datetime
    trust: str


def fold_message(rules: Sequence[str], lessons: Sequence[ShownLesson]) -> str:
    playbook = "\n".join(f"- {rule}" for rule in rules) if rules else "(no rules yet)"
    shown = "\n".join(
        f"[lesson:{lesson.item_id}] ({day(lesson.at)}, {lesson.trust}) {one_line(lesson.text)}" for lesson in lessons
    )
    return f"The playbook (data):\n{playbook}\n\nNew lessons (data):\n{shown}"


@dataclass(frozen=True)
class ShownFact:
    item_id: str
    kind: str
    attribute: str
    value: str
    since: datetime


def observation_message(name: str, aliases: Sequence[str], facts: Sequence[ShownFact]) -> str:
    also = f" (also called: {', '.join(one_line(a, 80) for a in aliases)})" if aliases else ""
    lines = [
        f"[item:{f.item_id}] {f.kind}, {one_line(f.attribute, 120)}: {one_line(f.value)} (since {day(f.since)})"
        for f in facts
    ]
    return f"The facts memory holds now about {one_line(name, 120)}{also} (data):\n" + "\n".join(lines)


@dataclass(frozen=True)
class BriefSource:
    """What memory found for a turn (004 BriefSource): `ref` is turn:<id> or item:<id>."""

    ref: str
    text: str
    date: str = ""


def brief_message(text: str, sources: Sequence[BriefSource]) -> str:
    shown = "\n".join(f"[{s.ref}] ({s.date or 'undated'}) {one_line(s.text, 1200)}" for s in sources)
    return f"The message (data):\n<<<\n{text}\n>>>\n\nSources memory found (data):\n{shown}"
