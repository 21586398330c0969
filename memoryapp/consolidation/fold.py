"""Lessons into the playbook (004 `foldLessons`, `promotePlaybook`), a few checked edits at a time.

The playbook (/memories/playbook.md) is a memory file of rules, one a line ("- rule [lesson:<id>]"),
that memory keeps for itself: agents read it, only these services write it. A fold shows a model
the rules and up to 20 new lessons and takes at most three edits, each adding a rule or rewriting
one rule it quotes exactly, so the playbook is never written over whole and cannot collapse into a
summary of itself. In playbook shadow mode (per agent, on by default) the edited playbook goes to
the draft (/memories/playbook.next.md) and a reviewer promotes it. Every fold is a new version of
its file, so the diff and the way back are in the file's history.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import DateTimeField, F, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce

from governance.audit.chain import audit_append
from memoryapp.consolidation.answers import ask
from memoryapp.consolidation.prompts import FOLD, ShownLesson, fold_message
from memoryapp.consolidation.state import Cursor, cursor_json, cursor_max, cursor_read, state_of
from memoryapp.errors import Conflict
from memoryapp.files.access import FileAccess, scope_narrowness
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.paths import MEMORY_RESERVED_PATHS
from memoryapp.files.protocol import file_delete
from memoryapp.files.selectors import file_heads, version_content, versions_for_agent, versions_seen
from memoryapp.files.services import file_put
from memoryapp.items.rules import Scope
from memoryapp.items.selectors import items_visible
from memoryapp.models import Agent, ConsolidationPass, ConsolidationState, MemoryFileVersion, MemoryItem
from memoryapp.models.choices import FileAuthor, ItemKind, ItemStatus, Trust
from memoryapp.prompts import prompt

PLAYBOOK_PATH = "/memories/playbook.md"
PLAYBOOK_DRAFT_PATH = "/memories/playbook.next.md"
assert PLAYBOOK_PATH in MEMORY_RESERVED_PATHS and PLAYBOOK_DRAFT_PATH in MEMORY_RESERVED_PATHS
LESSONS_A_FOLD = 20
MAX_PLAYBOOK_EDITS = 3
MAX_PLAYBOOK_RULES = 60
MAX_RULE_CHARS = 300
ANSWER_MAX_TOKENS = 2000
PLAYBOOK_HEADING = "# Playbook"
PLAYBOOK_INTRO = "Rules learned from lessons of past conversations; each names the lessons it stands on."
# A lesson from a tool or a page never reaches the playbook, even when active.
NEVER_FOLDED = (Trust.TOOL, Trust.WEB)
ACTOR = "job:consolidation"

_CITATION = re.compile(r"\[lesson:([A-Za-z0-9_.:-]+)\]")
_RULE = re.compile(r"^- (.*)$")


# --- the file and its edits ----------------------------------------------------------------------


def rule_lessons(rule: str) -> list[str]:
    """The lesson ids a rule names, in order, once each."""
    return list(dict.fromkeys(_CITATION.findall(rule)))


def rule_body(rule: str) -> str:
    """The rule without its [lesson:<id>] marks: what the 300-character limit counts."""
    return " ".join(_CITATION.sub(" ", rule).split())


def parse_playbook(text: str | None) -> list[str]:
    """The rules of a playbook file: its lines that start with "- ", without that mark."""
    rules = []
    for line in (text or "").splitlines():
        found = _RULE.match(line.rstrip())
        if found and found.group(1).strip():
            rules.append(found.group(1).strip())
    return rules


def playbook_file(rules: Sequence[str]) -> str:
    """A new playbook file holding `rules`."""
    return "\n".join([PLAYBOOK_HEADING, "", PLAYBOOK_INTRO, "", *(f"- {rule}" for rule in rules)]) + "\n"


@dataclass(frozen=True)
class PlaybookEdit:
    op: str  # "add" | "rewrite"
    rule: str
    old: str = ""

    def as_json(self) -> dict[str, str]:
        return {"op": self.op, "rule": self.rule, **({"old": self.old} if self.old else {})}


class EditsRefused(Exception):
    """The answer as a whole is not a set of edits this fold can take (too many, not edits)."""


def parse_playbook_edits(elements: Sequence[Any]) -> tuple[list[PlaybookEdit], list[dict[str, Any]]]:
    """The edits of a whole answer, and those left out for their shape.

    More than MAX_PLAYBOOK_EDITS edits refuse the answer whole (EditsRefused): the edits are
    decided as a set, and taking some of them would be taking a different set.
    """
    if len(elements) > MAX_PLAYBOOK_EDITS:
        raise EditsRefused(f"{len(elements)} edits: a fold takes at most {MAX_PLAYBOOK_EDITS}")
    edits: list[PlaybookEdit] = []
    refused: list[dict[str, Any]] = []
    for element in elements:
        op = element.get("op") if isinstance(element, dict) else None
        rule = element.get("rule") if isinstance(element, dict) else None
        old = element.get("old", "") if isinstance(element, dict) else ""
        if op not in ("add", "rewrite") or not isinstance(rule, str) or not isinstance(old, str):
            refused.append({"why": "not an edit"})
            continue
        if op == "rewrite" and not old.strip():
            refused.append({"why": "a rewrite quotes no rule"})
            continue
        edits.append(PlaybookEdit(op=op, rule=" ".join(rule.split()), old=old.strip() if op == "rewrite" else ""))
    return edits, refused


def apply_playbook_edits(
    text: str | None, edits: Sequence[PlaybookEdit], *, lesson_ids: Sequence[str]
) -> tuple[str, list[PlaybookEdit], list[dict[str, Any]]]:
    """The playbook with the edits that pass their checks made, one after another.

    1. A rule names its lessons as [lesson:<id>]: an added rule only lessons of this fold, a
       rewritten one at least one of them, and every lesson the old rule named (its lineage).
    2. A rule holds at most MAX_RULE_CHARS characters besides those marks, and some words.
    3. A rewrite quotes, exactly and whole, a rule that stands (after the edits before it).
    4. An add is refused once the playbook holds MAX_PLAYBOOK_RULES rules (then lessons only
       rewrite), and when the same rule already stands.
    Lines that are not rules (a heading, a person's notes) are kept as they are.
    Returns (new text, edits made, edits refused with why).
    """
    lines = (text or playbook_file([])).splitlines()
    folded = set(lesson_ids)
    made: list[PlaybookEdit] = []
    refused: list[dict[str, Any]] = []

    def rule_lines() -> dict[str, int]:
        found: dict[str, int] = {}
        for index, line in enumerate(lines):
            match = _RULE.match(line.rstrip())
            if match and match.group(1).strip():
                found.setdefault(match.group(1).strip(), index)
        return found

    for edit in edits:
        cited = set(rule_lessons(edit.rule))
        body = rule_body(edit.rule)
        standing = rule_lines()
        why = ""
        if not body:
            why = "the rule says nothing"
        elif len(body) > MAX_RULE_CHARS:
            why = f"the rule holds {len(body)} characters (at most {MAX_RULE_CHARS})"
        elif not cited:
            why = "the rule names no lesson"
        elif edit.op == "add":
            if cited - folded:
                why = "the rule names lessons this fold was not given"
            elif len(standing) >= MAX_PLAYBOOK_RULES:
                why = f"the playbook holds {MAX_PLAYBOOK_RULES} rules: lessons only rewrite rules now"
            elif edit.rule in standing:
                why = "the rule stands already"
        else:
            if edit.old not in standing:
                why = "the rule it rewrites is not quoted exactly"
            else:
                kept = set(rule_lessons(edit.old))
                if cited - folded - kept:
                    why = "the rule names lessons this fold was not given"
                elif not cited & folded:
                    why = "the rewrite names no lesson of this fold"
                elif kept - cited:
                    why = "the rewrite drops lessons the old rule named"
        if why:
            refused.append({**edit.as_json(), "why": why})
            continue
        if edit.op == "add":
            after = max(standing.values(), default=len(lines) - 1)
            lines.insert(after + 1, f"- {edit.rule}")
        else:
            lines[standing[edit.old]] = f"- {edit.rule}"
        made.append(edit)
    return "\n".join(lines) + "\n", made, refused


# --- reading the files ---------------------------------------------------------------------------


def fold_access(*, agent: Agent, scope: Scope, actor: str = ACTOR) -> FileAccess:
    """How consolidation writes: memory itself (author `memory`), past the reserved paths."""
    return FileAccess(
        agent=agent,
        user_id=scope.user_id,
        project_id=scope.project_id,
        thread_id=scope.thread_id,
        reserved=(),
        author=FileAuthor.MEMORY,
        actor=actor,
    )


def trusted_version(*, access: FileAccess, path: str) -> MemoryFileVersion | None:
    """The newest version of `path` that memory or a person wrote, of the narrowest scope the access
    sees that has one (a version a model wrote is skipped); None when that is a deletion or none."""
    versions = list(
        versions_seen(access=access, branch=False)
        .filter(path=path)
        .exclude(author=FileAuthor.MODEL)
        .defer("content")
        .order_by("-sequence")
    )
    if not versions:
        return None
    versions.sort(key=lambda v: (scope_narrowness(v.user_id, v.project_id, v.thread_id), v.sequence), reverse=True)
    chosen = versions[0]
    return chosen if version_content(chosen) is not None else None


def exact_head(*, agent: Agent, scope: Scope, path: str) -> MemoryFileVersion | None:
    """The newest version of `path` in exactly `scope` (a deletion included)."""
    return (
        versions_for_agent(agent=agent)
        .filter(user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id, path=path)
        .order_by("-sequence")
        .first()
    )


def standing_sha(access: FileAccess, path: str) -> str:
    """The sha256 of the file the access sees at `path` now ("" when none stands)."""
    head = file_heads(access=access, under=path).file(path)
    return head.sha256 if head is not None else ""


# --- lessons -------------------------------------------------------------------------------------


def lessons_pending(
    *, agent: Agent, scope: Scope, after: Cursor | None, system_only: bool = False
) -> QuerySet[MemoryItem]:
    """The active lessons `scope` sees, taken after `after`, oldest first, by when they were activated
    (metadata.activatedAt) else recorded, so a lesson activated after a fold is still folded.
    Lessons from a tool or a page are never among them."""
    lessons = (
        items_visible(agent=agent, user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id)
        .filter(kind=ItemKind.LESSON, status=ItemStatus.ACTIVE, expired_at__isnull=True)
        .exclude(trust__in=NEVER_FOLDED)
        .annotate(
            taken_at=Coalesce(Cast(KeyTextTransform("activatedAt", "metadata"), DateTimeField()), F("recorded_at"))
        )
    )
    if system_only:
        lessons = lessons.filter(trust=Trust.SYSTEM)
    if after is not None:
        lessons = lessons.filter(Q(taken_at__gt=after[0]) | Q(taken_at=after[0], id__gt=after[1]))
    return lessons.defer("embedding", "search_vector").order_by("taken_at", "id")


def _lesson_text(item: MemoryItem) -> str:
    head = f"{item.subject} {item.attribute}".strip()
    return f"{head}: {item.value}" if head else item.value


# --- folding -------------------------------------------------------------------------------------


@dataclass
class FoldOutcome:
    target: str  # the path written (or that would have been)
    lesson_ids: list[str] = field(default_factory=list)
    edits: list[dict[str, str]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    version_id: str = ""
    # The model did not answer with a whole set of edits: nothing folded, lessons left for the next fold.
    unfinished: bool = False
    why: str = ""
    # More lessons wait beyond this fold.
    more: bool = False

    def as_result(self) -> dict[str, Any]:
        return {
            "path": self.target,
            "lessons": len(self.lesson_ids),
            "edits": len(self.edits),
            "refused": self.refused,
            "version_id": self.version_id,
            "unfinished": self.unfinished,
            "why": self.why,
            "more": self.more,
            "prompt_version": FOLD,
        }


def _is_shared(scope: Scope) -> bool:
    """A playbook every user of the agent reads: no user, project or thread limits it."""
    return not (scope.user_id or scope.project_id or scope.thread_id)


def playbook_fold(*, agent: Agent, scope: Scope, shadow: bool | None = None, actor: str = ACTOR) -> FoldOutcome | None:
    """Fold the next lessons of `scope` into its playbook, or into its draft; None when none wait.

    1. Where the fold goes. Shadow mode (the agent's `playbook_shadow_mode` unless `shadow` is
       given): the draft. Otherwise the playbook, except for a playbook every user of the agent
       shares, which takes only system lessons directly: a batch holding any other lesson, or a
       draft still waiting, goes to the draft for review.
    2. What it builds on: a waiting draft made from the playbook as it stands now (it already
       holds lessons the playbook has not taken) with the lessons after the draft's; else the
       newest version of the playbook memory or a person wrote (one a model wrote is skipped),
       with the lessons after the playbook's.
    3. One call with the rules and up to LESSONS_A_FOLD lessons; an unfinished answer, or more
       than MAX_PLAYBOOK_EDITS edits, folds nothing and leaves the lessons for the next fold.
    4. The edits that pass their checks (`apply_playbook_edits`) are made and written as a new
       version (file_put with the sha256 read, so a writer in between fails this fold, which a
       later one does again), and the cursor moves past the lessons shown, in one transaction.
       Edits all refused leave the lessons for the next fold.
    """
    shadow = agent.playbook_shadow_mode if shadow is None else shadow
    plan = _fold_plan(agent=agent, scope=scope, shadow=shadow, actor=actor)
    pending = list(lessons_pending(agent=agent, scope=scope, after=plan.after)[: LESSONS_A_FOLD + 1])
    if not pending:
        return None
    outcome = FoldOutcome(target=plan.target, more=len(pending) > LESSONS_A_FOLD)
    lessons = pending[:LESSONS_A_FOLD]
    outcome.lesson_ids = [lesson.pk for lesson in lessons]
    edits = _fold_ask(base_text=plan.base_text, lessons=lessons, outcome=outcome)
    if edits is None:
        return outcome
    text, made, refused = apply_playbook_edits(plan.base_text, edits, lesson_ids=outcome.lesson_ids)
    outcome.refused += refused
    outcome.edits = [edit.as_json() for edit in made]
    if edits and not made:
        outcome.unfinished, outcome.why = True, "every edit was refused"
        return outcome
    last: Cursor = (lessons[-1].taken_at, lessons[-1].pk)  # type: ignore[attr-defined]
    _fold_write(plan=plan, agent=agent, scope=scope, text=text, made=made, last=last, actor=actor, outcome=outcome)
    return outcome


@dataclass
class _FoldPlan:
    """Steps 1 and 2 of a fold: where it goes and what it builds on, with the state it read."""

    access: FileAccess
    state: ConsolidationState
    target: str
    base_text: str | None
    # The lessons after this cursor are the ones to fold.
    after: Cursor | None
    playbook_through: Cursor | None
    # The sha256 of the playbook as it stands (a draft records it as its base).
    now_sha: str
    # A waiting draft made from the playbook as it stands now.
    draft_fresh: bool


def _fold_plan(*, agent: Agent, scope: Scope, shadow: bool, actor: str) -> _FoldPlan:
    """Steps 1 and 2: the target (playbook or draft) and the text and lessons cursor it builds on."""
    access = fold_access(agent=agent, scope=scope, actor=actor)
    state = state_of(agent=agent, scope=scope, kind=ConsolidationPass.FOLD)
    details = dict(state.details or {})
    playbook_through = cursor_read(details.get("playbook_through"))
    draft_through = cursor_read(details.get("draft_through"))
    now_sha = standing_sha(access, PLAYBOOK_PATH)
    draft = exact_head(agent=agent, scope=scope, path=PLAYBOOK_DRAFT_PATH)
    draft_fresh = (
        draft is not None
        and draft.content is not None
        and draft.author != FileAuthor.MODEL
        and draft.pk == details.get("draft_version")
        and details.get("draft_base") == now_sha
    )
    if shadow:
        to_draft = True
    elif not _is_shared(scope):
        to_draft = False
    elif draft_fresh:
        to_draft = True
    else:
        batch = list(lessons_pending(agent=agent, scope=scope, after=playbook_through)[:LESSONS_A_FOLD])
        to_draft = any(lesson.trust != Trust.SYSTEM for lesson in batch)
    if to_draft and draft_fresh and draft is not None:
        base_text, after, target = draft.content, draft_through, PLAYBOOK_DRAFT_PATH
    else:
        base = trusted_version(access=access, path=PLAYBOOK_PATH)
        base_text = base.content if base is not None else None
        after, target = playbook_through, PLAYBOOK_DRAFT_PATH if to_draft else PLAYBOOK_PATH
    return _FoldPlan(
        access=access,
        state=state,
        target=target,
        base_text=base_text,
        after=after,
        playbook_through=playbook_through,
        now_sha=now_sha,
        draft_fresh=draft_fresh,
    )


def _fold_ask(
    *, base_text: str | None, lessons: Sequence[MemoryItem], outcome: FoldOutcome
) -> list[PlaybookEdit] | None:
    """Step 3: the model's edits of the rules for these lessons; None (the outcome says why) when its
    answer is unfinished or holds too many edits."""
    answer = ask(
        system=prompt(FOLD).text,
        user=fold_message(
            parse_playbook(base_text),
            [ShownLesson(item_id=x.pk, text=_lesson_text(x), at=x.taken_at, trust=x.trust) for x in lessons],  # type: ignore[attr-defined]
        ),
        max_tokens=ANSWER_MAX_TOKENS,
    )
    elements = answer.whole
    if elements is None:
        outcome.unfinished, outcome.why = True, "the model did not finish its answer"
        return None
    try:
        edits, outcome.refused = parse_playbook_edits(elements)
    except EditsRefused as exc:
        outcome.unfinished, outcome.why = True, str(exc)
        return None
    return edits


def _fold_write(
    *,
    plan: _FoldPlan,
    agent: Agent,
    scope: Scope,
    text: str,
    made: Sequence[PlaybookEdit],
    last: Cursor,
    actor: str,
    outcome: FoldOutcome,
) -> None:
    """Step 4: the new version (when an edit was made) and the cursor past the lessons shown, in one
    transaction, audited; nothing when another fold or writer came first (the outcome says so)."""
    access, state, target = plan.access, plan.state, plan.target
    with transaction.atomic():
        locked = state_of(agent=agent, scope=scope, kind=ConsolidationPass.FOLD, for_update=True)
        if (locked.details or {}) != (state.details or {}):
            outcome.unfinished, outcome.why = True, "another fold of this scope ran meanwhile"
            return
        written = None
        if made:
            try:
                written = file_put(
                    access=access, path=target, text=text, expected_sha256=standing_sha(access, target) or None
                )
            except MemoryFileError as exc:
                outcome.unfinished, outcome.why = True, f"the file changed meanwhile ({exc.code})"
                return
            outcome.version_id = written.pk
        details = dict(locked.details or {})
        if target == PLAYBOOK_DRAFT_PATH:
            details["draft_through"] = cursor_json(last)
            if written is not None:
                details["draft_version"] = written.pk
                details["draft_base"] = plan.now_sha
            elif not plan.draft_fresh:
                # Nothing to draft from these lessons: the playbook has taken them as they are.
                details["playbook_through"] = cursor_json(cursor_max(plan.playbook_through, last))
        else:
            details["playbook_through"] = cursor_json(last)
        locked.details = details
        locked.save()
        audit_append(
            action="playbook.folded",
            actor=actor,
            agent_id=agent.pk,
            thread_id=scope.thread_id,
            person=scope.user_id,
            subject=written.pk if written is not None else target,
            outcome="draft" if target == PLAYBOOK_DRAFT_PATH else "playbook",
            details={"lesson_ids": outcome.lesson_ids, "edits": len(made), "refused": len(outcome.refused)},
        )


# --- promotion -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Promotion:
    playbook: MemoryFileVersion
    draft: MemoryFileVersion


def _waiting_draft(*, agent: Agent, scope: Scope, draft_version_id: str | None) -> MemoryFileVersion:
    draft = exact_head(agent=agent, scope=scope, path=PLAYBOOK_DRAFT_PATH)
    if draft is None or draft.content is None:
        raise Conflict("no_draft", "No playbook draft waits in this scope.")
    if draft_version_id and draft.pk != draft_version_id:
        raise Conflict("draft_changed", "The draft changed since you opened it: open it again.")
    return draft


def draft_refusal(
    *, agent: Agent, scope: Scope, draft: MemoryFileVersion, state: ConsolidationState | None = None
) -> Conflict | None:
    """Why promoting this waiting draft would be refused now (the Conflict `playbook_promote` raises),
    None when it may be promoted: the check the promotion makes, and the one the pages show before
    anyone clicks. `state`: the fold's record of the scope (read here when not given)."""
    if draft.author == FileAuthor.MODEL:
        return Conflict(
            "draft_by_model",
            "A model wrote this draft: a model cannot promote rules of its own into the playbook. Discard it.",
        )
    if state is None:
        state = state_of(agent=agent, scope=scope, kind=ConsolidationPass.FOLD)
    details = state.details or {}
    if details.get("draft_version") != draft.pk or "draft_base" not in details:
        return Conflict(
            "draft_unknown",
            "Nothing records which playbook this draft was made from, so it cannot be checked. Discard it; "
            "the next fold drafts again.",
        )
    if standing_sha(fold_access(agent=agent, scope=scope), PLAYBOOK_PATH) != details["draft_base"]:
        return Conflict(
            "playbook_changed",
            "The playbook changed since this draft was made: promoting it would undo that change. Discard the "
            "draft; the next fold drafts again on the playbook as it stands.",
        )
    return None


@transaction.atomic
def playbook_promote(*, agent: Agent, scope: Scope, actor: str, draft_version_id: str | None = None) -> Promotion:
    """Make the waiting draft the playbook (004 promotePlaybook), only when that keeps every change.

    Refused (Conflict, with the reason) when: no draft waits; the draft is not the version the
    reviewer read (`draft_version_id`); a model wrote the draft (a model does not promote its own
    rules); nothing records which playbook the draft was made from; or the playbook changed since
    the draft was made (promoting would undo that change: discard it, the next fold drafts again).
    Else the draft's text becomes a new version of the playbook, the draft is deleted (a version
    too), the playbook's lessons move up to the draft's, and the promotion is audited (ids only).
    """
    state = state_of(agent=agent, scope=scope, kind=ConsolidationPass.FOLD, for_update=True)
    draft = _waiting_draft(agent=agent, scope=scope, draft_version_id=draft_version_id)
    refusal = draft_refusal(agent=agent, scope=scope, draft=draft, state=state)
    if refusal is not None:
        raise refusal
    details = dict(state.details or {})
    access = fold_access(agent=agent, scope=scope, actor=actor)
    now_sha = standing_sha(access, PLAYBOOK_PATH)
    playbook = file_put(access=access, path=PLAYBOOK_PATH, text=draft.content or "", expected_sha256=now_sha or None)
    file_delete(access=access, path=PLAYBOOK_DRAFT_PATH, expected_sha256=draft.sha256)
    details["playbook_through"] = cursor_json(
        cursor_max(cursor_read(details.get("playbook_through")), cursor_read(details.get("draft_through")))
    )
    for key in ("draft_through", "draft_version", "draft_base"):
        details.pop(key, None)
    state.details = details
    state.save()
    audit_append(
        action="playbook.promoted",
        actor=actor,
        agent_id=agent.pk,
        thread_id=scope.thread_id,
        person=scope.user_id,
        subject=playbook.pk,
        outcome="promoted",
        details={"draft_version": draft.pk, "playbook_version": playbook.pk},
    )
    return Promotion(playbook=playbook, draft=draft)


@transaction.atomic
def playbook_discard(
    *, agent: Agent, scope: Scope, actor: str, draft_version_id: str | None = None
) -> MemoryFileVersion:
    """Throw the waiting draft away (a deletion version; its history stays), audited.

    The lessons it took count as taken: the next fold does not draft them again.
    """
    state = state_of(agent=agent, scope=scope, kind=ConsolidationPass.FOLD, for_update=True)
    draft = _waiting_draft(agent=agent, scope=scope, draft_version_id=draft_version_id)
    access = fold_access(agent=agent, scope=scope, actor=actor)
    file_delete(access=access, path=PLAYBOOK_DRAFT_PATH, expected_sha256=draft.sha256)
    details = dict(state.details or {})
    if details.get("draft_version") == draft.pk:
        details["playbook_through"] = cursor_json(
            cursor_max(cursor_read(details.get("playbook_through")), cursor_read(details.get("draft_through")))
        )
    for key in ("draft_through", "draft_version", "draft_base"):
        details.pop(key, None)
    state.details = details
    state.save()
    audit_append(
        action="playbook.draft_discarded",
        actor=actor,
        agent_id=agent.pk,
        thread_id=scope.thread_id,
        person=scope.user_id,
        subject=draft.pk,
        outcome="discarded",
    )
    return draft


@transaction.atomic
def playbook_shadow_mode_set(*, agent: Agent, on: bool, actor: str) -> Agent:
    """Turn an agent's playbook shadow mode on or off; audited. Off, folds write the playbook every
    run reads without review, so the caller checks the trust permission (memoryapp.set_agent_trust)."""
    locked = Agent.objects.select_for_update().get(pk=agent.pk)
    if locked.playbook_shadow_mode != on:
        locked.playbook_shadow_mode = on
        locked.save(update_fields=["playbook_shadow_mode"])
        audit_append(
            action="agent.playbook_shadow_mode_set",
            actor=actor,
            agent_id=locked.pk,
            subject=locked.slug,
            outcome="on" if on else "off",
            details={"from": not on, "to": on},
        )
    agent.playbook_shadow_mode = locked.playbook_shadow_mode
    return locked
