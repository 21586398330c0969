"""Observations (004 `MemoryObservations`): per entity, what a model makes of the facts that hold now.

Each observation is a memory file under /memories/observations/ of the scope, written by memory
itself (author `memory`): the entity's name and other names, the fingerprint of the items it was
written from, and statements, each ending with the items it stands on as [item:<id>]. It is written
again only when those facts change (one added, closed or marked stale), and deleted when the entity
no longer has enough facts. A version a model wrote is never read as an observation.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils.text import slugify

from governance.audit.chain import audit_append
from memoryapp.consolidation.answers import ask
from memoryapp.consolidation.prompts import OBSERVATIONS, ShownFact, observation_message, one_line
from memoryapp.consolidation.state import state_of
from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.paths import MEMORY_RESERVED_PATHS
from memoryapp.files.protocol import file_delete
from memoryapp.files.selectors import Snapshot, file_heads, path_under_q, version_content
from memoryapp.files.services import file_put
from memoryapp.items.rules import Scope
from memoryapp.items.selectors import items_holding
from memoryapp.models import Agent, ConsolidationPass, Entity, MemoryFileVersion, MemoryItem
from memoryapp.models.choices import FileAuthor, ItemKind
from memoryapp.prompts import prompt

OBSERVATIONS_DIRECTORY = "/memories/observations"
assert OBSERVATIONS_DIRECTORY + "/" in MEMORY_RESERVED_PATHS
DEFAULT_MAX_ENTITIES = 3
DEFAULT_MIN_ITEMS = 3
# Facts of one entity shown at most (the newest).
MAX_FACTS_SHOWN = 60
MAX_STATEMENTS = 8
MAX_STATEMENT_CHARS = 500
ANSWER_MAX_TOKENS = 1500
# Entities remembered as "gave no observation" per scope, at most.
MAX_REMEMBERED = 2000
# Only these authors' versions are read as observations (004: never one a model wrote).
TRUSTED_AUTHORS = (FileAuthor.MEMORY, FileAuthor.USER)
ACTOR = "job:consolidation"
_SCOPE_FIELDS = ("user_id", "project_id", "thread_id")

_ITEM_MARK = re.compile(r"\[item:([A-Za-z0-9_.:-]+)\]")
_HEADER = re.compile(r"^(Other names|Entity|Based on): ?(.*)$")


def statement_items(text: str) -> list[str]:
    return list(dict.fromkeys(_ITEM_MARK.findall(text)))


def statement_text(text: str) -> str:
    """A statement without its [item:<id>] marks (what a context shows)."""
    return " ".join(_ITEM_MARK.sub(" ", text).split())


def fingerprint(item_ids: Sequence[str]) -> str:
    """What an observation was written from: the ids of its facts, in any order."""
    return hashlib.sha256("\n".join(sorted(set(item_ids))).encode()).hexdigest()[:24]


@dataclass
class Observation:
    entity_id: str
    name: str
    aliases: list[str]
    path: str
    statements: list[str]
    based_on: str
    version: MemoryFileVersion | None = None

    @property
    def item_ids(self) -> list[str]:
        return list(dict.fromkeys(i for s in self.statements for i in statement_items(s)))

    @property
    def text(self) -> str:
        return " ".join(statement_text(s) for s in self.statements)


def observation_file(*, entity: Entity, based_on: str, facts: int, statements: Sequence[str]) -> str:
    aliases = [a for a in entity.aliases or [] if isinstance(a, str)]
    lines = [f"# {one_line(entity.name, 200)}", ""]
    if aliases:
        lines.append(f"Other names: {', '.join(one_line(a, 120) for a in aliases)}")
    lines += [f"Entity: {entity.pk}", f"Based on: {based_on} ({facts} facts)", ""]
    lines += [f"- {s}" for s in statements]
    return "\n".join(lines) + "\n"


def parse_observation(version: MemoryFileVersion) -> Observation | None:
    """The observation a version holds; None for a deletion, a version a model wrote, or a file that
    is not an observation (004 parseObservation)."""
    if version.author not in TRUSTED_AUTHORS:
        return None
    content = version_content(version)
    if content is None:
        return None
    name, aliases, entity_id, based_on = "", [], "", ""
    statements = []
    for line in content.splitlines():
        if line.startswith("# ") and not name:
            name = line[2:].strip()
            continue
        header = _HEADER.match(line)
        if header:
            key, value = header.groups()
            if key == "Other names":
                aliases = [a.strip() for a in value.split(",") if a.strip()]
            elif key == "Entity":
                entity_id = value.strip()
            else:
                based_on = value.split(" ", 1)[0].strip()
            continue
        if line.startswith("- ") and line[2:].strip():
            statements.append(line[2:].strip())
    if not entity_id or not statements:
        return None
    return Observation(
        entity_id=entity_id,
        name=name,
        aliases=aliases,
        path=version.path,
        statements=statements,
        based_on=based_on,
        version=version,
    )


def parse_statements(elements: Sequence[Any], *, given: set[str]) -> tuple[list[str], int]:
    """The statements of a whole answer that stand on items the model was given: (kept, dropped).

    A statement is {"text": "... [item:<id>]"} (a bare string is read too). One naming no item, or
    an item it was not given, is dropped.
    """
    kept: list[str] = []
    dropped = 0
    for element in elements:
        text = element.get("text") if isinstance(element, dict) else element
        if not isinstance(text, str):
            dropped += 1
            continue
        text = " ".join(text.split())
        cited = statement_items(text)
        if not cited or any(i not in given for i in cited) or not statement_text(text):
            dropped += 1
            continue
        if len(statement_text(text)) > MAX_STATEMENT_CHARS or text in kept or len(kept) >= MAX_STATEMENTS:
            dropped += 1
            continue
        kept.append(text)
    return kept, dropped


def observation_path(entity: Entity) -> str:
    slug = slugify(entity.name)[:60] or "entity"
    return f"{OBSERVATIONS_DIRECTORY}/{slug}-{entity.pk}.md"


def observations_access(*, agent: Agent, scope: Scope, actor: str = ACTOR) -> FileAccess:
    return FileAccess(
        agent=agent,
        user_id=scope.user_id,
        project_id=scope.project_id,
        thread_id=scope.thread_id,
        reserved=(),
        author=FileAuthor.MEMORY,
        actor=actor,
    )


def scope_observation_files(*, agent: Agent, scope: Scope) -> list[MemoryFileVersion]:
    """The observation files that stand in exactly `scope` (any author)."""
    access = observations_access(agent=agent, scope=scope)
    heads = file_heads(access=access, under=OBSERVATIONS_DIRECTORY, with_content=True)
    return [
        v
        for v in heads.files.values()
        if (v.user_id, v.project_id, v.thread_id) == (scope.user_id, scope.project_id, scope.thread_id)
    ]


def _entity_of_file(version: MemoryFileVersion) -> str:
    parsed = parse_observation(version)
    if parsed is not None:
        return parsed.entity_id
    stem = version.path.rsplit("/", 1)[-1].removesuffix(".md")
    return stem.rsplit("-", 1)[-1] if "-" in stem else ""


@dataclass
class RefreshOutcome:
    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    no_observation: int = 0
    unfinished: int = 0
    dropped_statements: int = 0
    calls: int = 0
    # False when entities whose facts changed were left for a later refresh (max_entities).
    complete: bool = True

    def as_result(self) -> dict[str, Any]:
        return {
            "written": self.written,
            "deleted": self.deleted,
            "unchanged": self.unchanged,
            "no_observation": self.no_observation,
            "unfinished": self.unfinished,
            "dropped_statements": self.dropped_statements,
            "calls": self.calls,
            "complete": self.complete,
            "prompt_version": OBSERVATIONS,
        }


def observations_refresh(
    *,
    agent: Agent,
    scope: Scope,
    max_entities: int = DEFAULT_MAX_ENTITIES,
    min_items: int = DEFAULT_MIN_ITEMS,
    actor: str = ACTOR,
) -> RefreshOutcome:
    """Write again the observations of `scope` whose facts changed; delete those without enough facts.

    1. The facts the scope sees that hold now, lessons and 002 facts left out, by entity.
    2. An entity with a fact of exactly this scope and `min_items` facts or more (of the scopes it
       sees) whose observation file in this scope was written
       from other facts (its fingerprint differs), and whose facts did not already give no
       observation, is due; the entities with the newest facts first, at most `max_entities`
       (more due: the refresh is not complete).
    3. One call each. An unfinished answer writes nothing (asked again later). Statements naming
       an item the model was not given are dropped; with none left nothing is written and the
       fingerprint is remembered, so those facts are not asked about again until they change.
    4. The file is written by memory (a new version), with the sha256 it was read at.
    5. Observation files of this scope whose entity has fewer than `min_items` facts, or none of
       exactly this scope, are deleted.
    """
    outcome = RefreshOutcome()
    by_entity, own = _facts_by_entity(agent=agent, scope=scope)
    files = {_entity_of_file(v): v for v in scope_observation_files(agent=agent, scope=scope)}
    state = state_of(agent=agent, scope=scope, kind=ConsolidationPass.OBSERVATIONS)
    remembered: dict[str, str] = dict((state.details or {}).get("no_observation") or {})
    due = _entities_due(
        by_entity=by_entity,
        own=own,
        files=files,
        remembered=remembered,
        min_items=min_items,
        max_entities=max_entities,
        outcome=outcome,
    )
    entities = Entity.objects.in_bulk([d[0] for d in due])
    access = observations_access(agent=agent, scope=scope, actor=actor)
    for entity_id, wanted_print in due:
        entity = entities.get(entity_id)
        if entity is None:
            continue
        _observation_write(
            entity_id=entity_id,
            entity=entity,
            items=by_entity[entity_id],
            wanted_print=wanted_print,
            current=files.get(entity_id),
            access=access,
            scope=scope,
            actor=actor,
            remembered=remembered,
            outcome=outcome,
        )
    _observations_unsupported_delete(
        files=files,
        by_entity=by_entity,
        own=own,
        min_items=min_items,
        access=access,
        scope=scope,
        actor=actor,
        outcome=outcome,
    )
    _remember(agent=agent, scope=scope, remembered=remembered, live=set(by_entity))
    return outcome


def _facts_by_entity(*, agent: Agent, scope: Scope) -> tuple[dict[str, list[MemoryItem]], set[str]]:
    """Step 1: the facts the scope sees that hold now, newest first, by entity; and the entities with
    a fact of exactly this scope (the others' observations belong to the wider scope that holds
    their facts: every person's scope would otherwise write its own copy)."""
    facts = (
        items_holding(agent=agent, user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id)
        .exclude(kind=ItemKind.LESSON)
        .filter(namespace="", entity__isnull=False)
        .only("id", "entity_id", "kind", "attribute", "value", "valid_from", "recorded_at", *_SCOPE_FIELDS)
        .order_by("-recorded_at", "-id")
    )
    by_entity: dict[str, list[MemoryItem]] = defaultdict(list)
    own: set[str] = set()
    exact = (scope.user_id, scope.project_id, scope.thread_id)
    for fact in facts:
        by_entity[str(fact.entity_id)].append(fact)
        if (fact.user_id, fact.project_id, fact.thread_id) == exact:
            own.add(str(fact.entity_id))
    return by_entity, own


def _entities_due(
    *,
    by_entity: dict[str, list[MemoryItem]],
    own: set[str],
    files: dict[str, MemoryFileVersion],
    remembered: dict[str, str],
    min_items: int,
    max_entities: int,
    outcome: RefreshOutcome,
) -> list[tuple[str, str]]:
    """Step 2: (entity id, fingerprint) of the entities due, newest facts first, at most `max_entities`."""
    due: list[tuple[str, str]] = []
    for entity_id, items in by_entity.items():
        if len(items) < min_items or entity_id not in own:
            continue
        wanted_print = fingerprint([i.pk for i in items])
        current = files.get(entity_id)
        parsed = parse_observation(current) if current is not None else None
        if (parsed is not None and parsed.based_on == wanted_print) or remembered.get(entity_id) == wanted_print:
            outcome.unchanged += 1
            continue
        due.append((entity_id, wanted_print))
    due.sort(key=lambda d: (by_entity[d[0]][0].recorded_at, d[0]), reverse=True)
    if len(due) > max_entities:
        outcome.complete = False
        due = due[:max_entities]
    return due


def _observation_write(
    *,
    entity_id: str,
    entity: Entity,
    items: list[MemoryItem],
    wanted_print: str,
    current: MemoryFileVersion | None,
    access: FileAccess,
    scope: Scope,
    actor: str,
    remembered: dict[str, str],
    outcome: RefreshOutcome,
) -> None:
    """Steps 3 and 4 for one entity: ask the model, keep the statements standing on facts it was given,
    write the file (or remember that these facts gave none)."""
    shown = items[:MAX_FACTS_SHOWN]
    answer = ask(
        system=prompt(OBSERVATIONS).text,
        user=observation_message(
            entity.name,
            [a for a in entity.aliases or [] if isinstance(a, str)],
            [ShownFact(i.pk, i.kind, i.attribute, i.value, i.valid_from) for i in reversed(shown)],
        ),
        max_tokens=ANSWER_MAX_TOKENS,
    )
    outcome.calls += 1
    elements = answer.whole
    if elements is None:
        outcome.unfinished += 1
        return
    statements, dropped = parse_statements(elements, given={i.pk for i in shown})
    outcome.dropped_statements += dropped
    if not statements:
        outcome.no_observation += 1
        remembered[entity_id] = wanted_print
        return
    path = current.path if current is not None else observation_path(entity)
    text = observation_file(entity=entity, based_on=wanted_print, facts=len(items), statements=statements)
    try:
        with transaction.atomic():
            version = file_put(
                access=access, path=path, text=text, expected_sha256=current.sha256 if current is not None else None
            )
            audit_append(
                action="observation.written",
                actor=actor,
                agent_id=access.agent.pk,
                thread_id=scope.thread_id,
                person=scope.user_id,
                subject=version.pk,
                outcome="written",
                details={"entity_id": entity_id, "items": len(shown), "statements": len(statements)},
            )
    except MemoryFileError:
        outcome.unfinished += 1  # another writer changed it meanwhile: the next refresh looks again
        return
    remembered.pop(entity_id, None)
    outcome.written.append(path)


def _observations_unsupported_delete(
    *,
    files: dict[str, MemoryFileVersion],
    by_entity: dict[str, list[MemoryItem]],
    own: set[str],
    min_items: int,
    access: FileAccess,
    scope: Scope,
    actor: str,
    outcome: RefreshOutcome,
) -> None:
    """Step 5: delete the scope's observation files whose entity has fewer than `min_items` facts, or
    none of exactly this scope."""
    for entity_id, version in files.items():
        if len(by_entity.get(entity_id, ())) >= min_items and entity_id in own:
            continue
        try:
            with transaction.atomic():
                file_delete(access=access, path=version.path, expected_sha256=version.sha256)
                audit_append(
                    action="observation.deleted",
                    actor=actor,
                    agent_id=access.agent.pk,
                    thread_id=scope.thread_id,
                    person=scope.user_id,
                    subject=version.pk,
                    outcome="deleted",
                    details={"entity_id": entity_id, "facts": len(by_entity.get(entity_id, ()))},
                )
        except MemoryFileError:
            continue
        outcome.deleted.append(version.path)


def _remember(*, agent: Agent, scope: Scope, remembered: dict[str, str], live: set[str]) -> None:
    """Keep the fingerprints of facts that gave no observation (of entities that still have facts)."""
    kept = {k: v for k, v in remembered.items() if k in live}
    if len(kept) > MAX_REMEMBERED:
        kept = dict(sorted(kept.items())[-MAX_REMEMBERED:])
    with transaction.atomic():
        state = state_of(agent=agent, scope=scope, kind=ConsolidationPass.OBSERVATIONS, for_update=True)
        details = dict(state.details or {})
        if details.get("no_observation") == kept and state.pk is not None:
            return
        details["no_observation"] = kept
        state.details = details
        state.save()


# --- reading observations for a run --------------------------------------------------------------


def observations_seen(*, agent: Agent, scope: Scope) -> list[Observation]:
    """The observations a run of `scope` may read: those of its scopes (the narrowest per path), each
    only when memory or a person wrote the version that stands."""
    access = FileAccess(agent=agent, user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id)
    return observations_of(file_heads(access=access, under=OBSERVATIONS_DIRECTORY, with_content=True))


def observations_q(*, agent: Agent, scope: Scope) -> Q:
    """The versions `observations_seen` reads the heads of (for a reader that reads them with others)."""
    access = FileAccess(agent=agent, user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id)
    return access.scopes_seen() & path_under_q(OBSERVATIONS_DIRECTORY)


def observations_of(heads: Snapshot) -> list[Observation]:
    """The observations of the files a run sees (`observations_seen`, from its snapshot)."""
    found = [parse_observation(v) for v in heads.files.values()]
    return [o for o in found if o is not None]
