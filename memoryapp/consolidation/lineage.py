"""The files consolidation writes go with the items they name (004 "Forgetting, Redacting and Rewinding").

A playbook rule names its lessons ([lesson:<id>]) and an observation's statements their items
([item:<id>]). When a cascade purges items (`memoryapp.forgetting.lineage.derived_forget`), every
version of a playbook, a draft or an observation that names one of them is redacted. A playbook
(or draft) in front is first written again without the rules that stood on such a lesson, so the
other rules stay; an observation in front is deleted after its redaction, so its path leaves the
listing, and the next refresh writes it again from the facts that are left.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Q, QuerySet

from governance.crypto.keyring import encryption_enabled
from memoryapp.consolidation.fold import PLAYBOOK_DRAFT_PATH, PLAYBOOK_PATH, fold_access, rule_lessons
from memoryapp.consolidation.observations import OBSERVATIONS_DIRECTORY, statement_items
from memoryapp.consolidation.state import scope_of
from memoryapp.files.protocol import file_delete
from memoryapp.files.services import file_put, versions_redact
from memoryapp.models import Agent, ConsolidationPass, ConsolidationState, MemoryFileVersion
from memoryapp.subjects.erasing import person_being_erased

# Ids looked for per query (each one a LIKE of its marks).
CHUNK = 200
ACTOR = "lineage"


@dataclass
class DerivedFilesReport:
    versions_redacted: int = 0
    playbook_rules_removed: int = 0
    observations_deleted: int = 0
    # The versions redacted (for the cascade's change event: ids only).
    redacted_version_ids: list[str] = field(default_factory=list, repr=False)


# The marks by which a playbook rule or an observation names the items it stands on.
_NAMED = re.compile(r"\[(?:lesson|item):([^\]\s]+)\]")


def _naming(ids: Sequence[str]) -> Q:
    wanted = Q(pk__in=[])
    for item_id in ids:
        wanted |= Q(content__contains=f"[lesson:{item_id}]") | Q(content__contains=f"[item:{item_id}]")
    return wanted


def _versions_naming(files: QuerySet[MemoryFileVersion], gone: list[str]) -> set[str]:
    """The ids of the versions among `files` that name one of the items `gone`.

    With encryption off, the database finds them (`content LIKE`), a chunk of ids at a time. With
    it on, the content is sealed, so each version is opened and read here: `files` is bounded to the
    agent's playbooks, drafts and observations not redacted yet.
    """
    naming: set[str] = set()
    if not encryption_enabled():
        for start in range(0, len(gone), CHUNK):
            naming.update(files.filter(_naming(gone[start : start + CHUNK])).values_list("pk", flat=True))
        return naming
    wanted = set(gone)
    for pk, content in files.values_list("pk", "content").iterator(chunk_size=200):
        if content and wanted.intersection(_NAMED.findall(content)):
            naming.add(pk)
    return naming


def _without_rules(text: str, gone: set[str]) -> tuple[str, int]:
    """The playbook without the rule lines that name a lesson that went; (text, rules removed)."""
    kept, removed = [], 0
    for line in text.splitlines():
        if line.startswith("- ") and set(rule_lessons(line)) & gone:
            removed += 1
            continue
        kept.append(line)
    return "\n".join(kept) + "\n", removed


def derived_files_forget(*, agent: Agent, item_ids: Sequence[str]) -> DerivedFilesReport:
    """Take the purged items out of the playbooks, drafts and observations that name them (call inside
    the cascade's transaction, after the items went).

    1. The versions of those files that name a purged item, found a chunk of ids at a time.
    2. Each playbook or draft in front among them is written again without the rules naming a
       purged lesson (a new version by memory); a waiting draft's record follows it, so it can
       still be promoted over the playbook rewritten the same way. In the scope of a person being
       erased it is deleted instead (a deletion version): a version with content there is refused
       (memoryapp.subjects.erasing, step 5), and her erasure deletes her files anyway.
    3. Each observation in front among them is deleted (a deletion version).
    4. Every version found is redacted, as a redacted entry's file versions are.

    Only removals, so nothing of it is refused while a person of a scope it touches is erased.
    """
    report = DerivedFilesReport()
    gone = sorted(set(item_ids))
    if not gone:
        return report
    files = MemoryFileVersion.objects.filter(agent=agent, content__isnull=False, redacted_at__isnull=True).filter(
        Q(path__in=[PLAYBOOK_PATH, PLAYBOOK_DRAFT_PATH]) | Q(path__startswith=OBSERVATIONS_DIRECTORY + "/")
    )
    naming = _versions_naming(files, gone)
    if not naming:
        return report
    found = list(MemoryFileVersion.objects.filter(pk__in=naming).order_by("agent_id", "sequence"))
    gone_set = set(gone)
    rewritten: dict[tuple[str, str, str], dict[str, str]] = {}
    erasing: dict[str, bool] = {}
    for version in found:
        head = (
            MemoryFileVersion.objects.filter(
                agent=agent,
                user_id=version.user_id,
                project_id=version.project_id,
                thread_id=version.thread_id,
                path=version.path,
            )
            .order_by("-sequence")
            .values_list("pk", flat=True)
            .first()
        )
        if head != version.pk:
            continue
        scope = scope_of(version)
        access = fold_access(agent=agent, scope=scope, actor=ACTOR)
        if version.path in (PLAYBOOK_PATH, PLAYBOOK_DRAFT_PATH) and _being_erased(agent, scope.user_id, erasing):
            # The rules left would be a new version of hers: the whole file goes, as her erasure's
            # files step takes it (a deletion adds nothing of her).
            file_delete(access=access, path=version.path)
            report.playbook_rules_removed += _without_rules(version.content or "", gone_set)[1]
        elif version.path in (PLAYBOOK_PATH, PLAYBOOK_DRAFT_PATH):
            text, removed = _without_rules(version.content or "", gone_set)
            written = file_put(access=access, path=version.path, text=text)
            report.playbook_rules_removed += removed
            key = (scope.user_id, scope.project_id, scope.thread_id)
            rewritten.setdefault(key, {})[version.path] = written.pk
            rewritten[key][f"{version.path}:old"] = version.pk
            rewritten[key][f"{version.path}:old_sha"] = version.sha256
            rewritten[key][f"{version.path}:new_sha"] = written.sha256
        elif any(i in gone_set for i in statement_items(version.content or "")):
            file_delete(access=access, path=version.path)
            report.observations_deleted += 1
    for (user_id, project_id, thread_id), paths in rewritten.items():
        _follow_rewrites(agent=agent, user_id=user_id, project_id=project_id, thread_id=thread_id, paths=paths)
    redacting = MemoryFileVersion.objects.filter(pk__in=naming, redacted_at__isnull=True)
    report.redacted_version_ids = sorted(redacting.values_list("pk", flat=True))
    report.versions_redacted = versions_redact(MemoryFileVersion.objects.filter(pk__in=report.redacted_version_ids))
    return report


def _being_erased(agent: Agent, user_id: str, asked: dict[str, bool]) -> bool:
    """Whether the person of a scope (none: a project's or the agent's) is being erased, asked once
    per person (memoryapp.subjects.erasing.person_being_erased)."""
    if not user_id:
        return False
    if user_id not in asked:
        asked[user_id] = person_being_erased(agent_id=agent.pk, user_id=user_id)
    return asked[user_id]


def _follow_rewrites(*, agent: Agent, user_id: str, project_id: str, thread_id: str, paths: dict[str, str]) -> None:
    """The fold's record of a draft follows what the cascade wrote: the draft's new version, and the
    playbook's new sha256 when the draft was made from the playbook as it stood before."""
    state = (
        ConsolidationState.objects.select_for_update()
        .filter(
            agent=agent,
            user_id=user_id,
            project_id=project_id,
            thread_id=thread_id,
            pass_kind=ConsolidationPass.FOLD,
        )
        .first()
    )
    if state is None:
        return
    details = dict(state.details or {})
    if PLAYBOOK_DRAFT_PATH in paths and details.get("draft_version") == paths[f"{PLAYBOOK_DRAFT_PATH}:old"]:
        details["draft_version"] = paths[PLAYBOOK_DRAFT_PATH]
    if PLAYBOOK_PATH in paths and details.get("draft_base") == paths[f"{PLAYBOOK_PATH}:old_sha"]:
        details["draft_base"] = paths[f"{PLAYBOOK_PATH}:new_sha"]
    state.details = details
    state.save()
