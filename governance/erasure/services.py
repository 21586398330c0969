"""Erasure requests: a privacy officer asks, a job erases the person, a report proves it.

The request is one row (`ErasureRequest`); the work is `person_erase` (memoryapp.forgetting.person),
run by the job `governance.tasks.erasure_job`; the proof is a report built after the cascade.

1. `erasure_request_file`: check the input (a 4xx naming the field, nothing written), save the
   request, audit `erasure.request` (its id, mode and number of agents: the typed legal basis and
   reason stay on the request), send the job after commit.
2. The job (`erasure_run`), guarded on the request's status so a rerun is harmless:
   a. Legal holds (`holds_blocking`) on the person or one of their threads, in the chosen agents,
      read once the run holds the person's erasure lock (`erasure_gate`, held to the end of step c:
      memoryapp.subjects.erasing step 6): the request is `blocked`, naming the holds,
      before anything changes (audit `erasure.blocked`).
   b. Probes, taken before anything is erased and kept in memory only: the person's user id, the
      other identifiers of the request, and sample strings cut from the person's entries.
   c. `person_erase`, batch after batch, its progress written into the request.
   d. The leftover scan (`leftovers_scan`): every table holding content, within the chosen agents,
      searched for the probes; a finding names the table, the row id and which probe matched
      ("user id", "identifier 2", "sample 7"), never what the row says. Columns sealed at rest
      (governance.crypto) are opened here, in the worker: the database sees only ciphertext.
   e. The report (counts, tables scanned, findings), its sha256 over the canonical JSON; the
      request `done`; audit `erasure.done` with the counts and the sha256; the change event
      `erasure.done` for each agent that held something about the person. The report is signed
      with the service's key (governance.receipts): the receipt is kept beside it.
   Any error fails the request (audit `erasure.failed`, the error's type only) and the job.
3. `erasure_request_retry`: a failed or blocked request runs again (a new job run): person_erase
   takes what is left, and the report counts it. Its samples are taken from what is left then.

The raw SQL of the scan is built here only, with psycopg.sql.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, models, transaction
from django.db.models import Count, Q
from django.utils import timezone
from psycopg import sql

from governance.audit.chain import audit_append, audit_rehearsal, canonical_json
from governance.crypto.envelope import data_keys_of_person, key_set_ids
from governance.crypto.fields import (
    KEY_PEOPLE,
    BlindIndexField,
    SealedJSONField,
    SealedTextField,
    json_text_open,
    value_open,
)
from governance.crypto.keyring import keyring
from governance.crypto.sealing import PREFIX as SEALED_PREFIX
from governance.crypto.sealing import SealError
from governance.erasure.files import files_scan
from governance.erasure.tally import HASHES, PSEUDONYMS, rows_tallied, tally_totals
from governance.export.services import exports_forget_person
from governance.jobs.broker import job_enqueue
from governance.jobs.runs import job_fail, job_progress, run_lock_release, run_lock_try
from governance.models import AuditRecord, DataKey, ErasureRequest, JobRun
from governance.receipts import receipt_sign
from governance.retention.held import holds_blocking
from memoryapp.consolidation.fold import PLAYBOOK_DRAFT_PATH, PLAYBOOK_PATH, rule_body, rule_lessons
from memoryapp.content import REDACTED_TEXT
from memoryapp.errors import DomainError
from memoryapp.events.services import event_record
from memoryapp.forgetting.mentions import GROUPS
from memoryapp.forgetting.person import person_erase
from memoryapp.items.facts import PERSON_PREFIX
from memoryapp.models import Agent, Entry, Evidence, MemoryFileVersion, MemoryItem, Thread, WebhookDelivery
from memoryapp.models.choices import EntryType, Role
from memoryapp.models.people import PersonIdentifier, sent_by
from memoryapp.screening.identifiers import identifiers_classified
from memoryapp.subjects.erasing import erasure_gate

logger = logging.getLogger(__name__)

REPORT_FORMAT = "erasure-report/1"
JOB_TASK = "governance.tasks.erasure_job"
JOB_KIND = "erasure"
Status = ErasureRequest.Status
# Requests that may be run again from the admin.
RETRYABLE = (Status.FAILED, Status.BLOCKED)
# A request failed on an error that passes by itself is run again automatically (`erasure_auto_retry`),
# at most this many times, each after its wait (counted from the failure); the page says when.
AUTO_RETRY_WAITS = (timedelta(minutes=5), timedelta(minutes=30), timedelta(hours=2))
AUTO_RETRY_ACTOR = "erasure:auto-retry"
# The errors that pass by themselves (their type's name, as the request's `error` starts): the
# database or the broker unreachable or restarted, a connection cut, the job's time limit. Any
# other (a defect, a key that cannot open a row, a check refusing) fails the same way again.
TRANSIENT_ERRORS = frozenset(
    {
        "OperationalError",
        "InterfaceError",
        "ConnectionError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "TimeoutError",
        "SoftTimeLimitExceeded",
        "TimeLimitExceeded",
        "WorkerLostError",
    }
)

# Sample strings cut from the person's entries before erasure (kept in memory only).
SAMPLES_MAX = 20
SAMPLE_ENTRIES_LOOKED_AT = 200
SAMPLE_MIN_CHARS = 12
SAMPLE_MAX_CHARS = 48
# Other identifiers a request may carry, and their length.
IDENTIFIERS_MAX = 10
IDENTIFIER_MIN_CHARS = 3
IDENTIFIER_MAX_CHARS = 200
# Findings the report lists per table (their number is always counted in full).
FINDINGS_LISTED_PER_TABLE = 200
# Rows with sealed values read (and opened) at a time by the leftover scan.
SEALED_SCAN_BATCH = 1000
# Typed text kept on the request only.
REASON_MAX_CHARS = 4000

# What a redaction keeps on purpose: the person's threads (their place, and whose they are), the
# places of their entries, the redacted versions of the files of their scope (a file's history), and
# the key of their pseudonyms (governance.audit.pseudonyms: their audit records still link to them).
# A row of these tables matched by the user id alone is "kept", not a leftover.
REDACTION_KEEPS = ("memoryapp_thread", "memoryapp_entry", "memoryapp_memoryfileversion", "governance_pseudonymkey")
ID_PROBE = "user id"
THREAD_PROBE = "thread id "
ERASED_ID_PROBE = "erased row id"
# The ids of erased rows looked for in array columns, at most (of entries, and of items).
ERASED_IDS_MAX = 200_000


# Tables not scanned, by model (app_label.model), and why; the report lists them, and every column
# of the database with whether it was scanned or why not (`scan_coverage`).
NOT_SCANNED: dict[str, str] = {
    "memoryapp.agent": "agents: slug and name of the agent, nobody's data",
    "memoryapp.agentkey": "agent keys: hashes and prefixes",
    "memoryapp.webhook": "webhooks: an agent's URL and secret",
    "memoryapp.eventcounter": "numbers of each agent's change events",
    "contenttypes.contenttype": "the names of the service's models",
    "auth.permission": "the names of staff permissions",
    "auth.group": "staff groups (roles): their names",
    "sessions.session": "staff sign-in sessions: signed and encoded, they expire (SESSION_COOKIE_AGE)",
}
# Tables of the database that are no model of the service, and why they are not scanned.
NOT_MODELS: dict[str, str] = {
    "django_migrations": "the names of the code's migrations applied",
}
# Tables scanned whose rows name the person on purpose: a match there is listed as `kept`, with
# this reason, not as a leftover.
KEPT_ON_PURPOSE: dict[str, str] = {
    "governance_erasurerequest": "erasure requests name whom they are for (this one too): the record of the erasure",
    "governance_exportrequest": "export requests answered for the person: the record of a data subject access "
    "request (its archives are deleted by an erasure)",
    "memoryapp_legalhold": "legal holds: the record of what had to be kept names the person on purpose (lifted ones too)",
    "governance_datakey": "the register of data keys: a destroyed key's row keeps its owner's id, so a copy's "
    "ciphertext is known to be unopenable",
}
# The service's bookkeeping: scanned, and what names the person there is listed apart
# (`bookkeeping`, with its own count), for it is not memory an agent recalls: the audit trail is a
# hash chain no erasure may edit (its records are to name people by pseudonym only), events and the
# access log name rows and threads, Django's admin log names what staff did. The report's outcome
# speaks of memory; its summary says how many bookkeeping rows still name the person.
BOOKKEEPING: dict[str, str] = {
    "governance_auditrecord": "the audit trail (a hash chain: never edited)",
    "memoryapp_event": "change events",
    "memoryapp_accesslog": "the access log",
    "django_admin_log": "Django's admin log",
}


# --- filing and retrying ------------------------------------------------------------------------


def _text_check(value: Any, *, field: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise DomainError("invalid_value", f"`{field}` must be text.", field=field)
    if "\x00" in value:
        raise DomainError("invalid_value", f"`{field}` has a NUL character.", field=field)
    if len(value) > max_chars:
        raise DomainError("too_long", f"`{field}` is longer than {max_chars} characters.", field=field)
    return value.strip()


def _identifiers_check(identifiers: Sequence[str]) -> list[str]:
    cleaned: list[str] = []
    for value in identifiers:
        text = _text_check(value, field="identifiers", max_chars=IDENTIFIER_MAX_CHARS)
        if not text:
            continue
        if len(text) < IDENTIFIER_MIN_CHARS:
            raise DomainError(
                "invalid_value",
                f"An identifier needs at least {IDENTIFIER_MIN_CHARS} characters (a shorter one matches anything).",
                field="identifiers",
            )
        if text not in cleaned:
            cleaned.append(text)
    if len(cleaned) > IDENTIFIERS_MAX:
        raise DomainError("too_many", f"At most {IDENTIFIERS_MAX} other identifiers.", field="identifiers")
    return cleaned


def _agents_check(agent_ids: Sequence[int]) -> list[int]:
    wanted = sorted({int(a) for a in agent_ids})
    found = set(Agent.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    missing = [a for a in wanted if a not in found]
    if missing:
        raise DomainError("unknown_agent", f"No agent has the id {missing[0]}.", field="agent_ids")
    return wanted


# Why an officer may leave a group of mentions out of an erasure (GDPR Art. 17(3)); typed, so the
# audit record carries the reason and never a free text about the person.
EXCLUSION_REASONS = ("legal_obligation", "public_interest", "legal_claims", "freedom_of_expression", "not_the_person")


def _excluded_check(excluded: Any) -> dict[str, str]:
    if excluded is None:
        return {}
    if not isinstance(excluded, dict):
        raise DomainError("invalid_type", "excluded must map groups to reasons.", field="excluded")
    for group, why in excluded.items():
        if group not in GROUPS:
            raise DomainError("invalid_value", f"{group} is not one of {', '.join(GROUPS)}.", field="excluded")
        if why not in EXCLUSION_REASONS:
            raise DomainError(
                "invalid_value", f"The reason is one of {', '.join(EXCLUSION_REASONS)}.", field=f"excluded.{group}"
            )
    return {str(group): str(why) for group, why in excluded.items()}


def erasure_request_file(
    *,
    user_id: str,
    identifiers: Sequence[str] = (),
    agent_ids: Sequence[int] = (),
    mode: str = "erase",
    legal_basis: str = "",
    reason: str = "",
    requested_by: Any = None,
    actor: str = "",
    excluded: dict[str, str] | None = None,
) -> ErasureRequest:
    """Save an erasure request and send its job after commit (see the module's step 1).

    `agent_ids` empty: every agent. `excluded`: the groups of mentions left out ({group: reason},
    the reason one of EXCLUSION_REASONS, audited as such). Bad input raises DomainError naming the
    field; nothing is saved.
    """
    person = _text_check(user_id, field="user_id", max_chars=128)
    if not person:
        raise DomainError("required", "The person's user id is required.", field="user_id")
    if mode not in ErasureRequest.Mode.values:
        raise DomainError("invalid_value", "`mode` is erase or redact.", field="mode")
    others = _identifiers_check(identifiers)
    left_out = _excluded_check(excluded)
    basis = _text_check(legal_basis, field="legal_basis", max_chars=200)
    why = _text_check(reason, field="reason", max_chars=REASON_MAX_CHARS)
    with transaction.atomic():
        agents = _agents_check(agent_ids)
        request = ErasureRequest.objects.create(
            user_id=person,
            identifiers=others,
            agent_ids=agents,
            excluded=left_out,
            mode=mode,
            legal_basis=basis,
            reason=why,
            requested_by=requested_by if getattr(requested_by, "pk", None) else None,
            requested_by_name=actor[:200],
        )
        audit_append(
            action="erasure.request",
            actor=actor,
            subject=str(request.pk),
            outcome="queued",
            details={"request": request.pk, "mode": mode, "agents": len(agents) or "all", "excluded": left_out},
        )
        _job_send(request)
    return request


def holds_in_the_way(*, user_id: str, agent_ids: Sequence[int]) -> list[int]:
    """The legal holds in force (ids) on the person, or on one of their threads, in the agents."""
    threads = Thread.objects.filter(user_id=user_id)
    if agent_ids:
        threads = threads.filter(agent_id__in=agent_ids)
    holds = holds_blocking(
        user_id=user_id,
        agent_ids=list(agent_ids) or None,
        thread_ids=list(threads.values_list("external_id", flat=True).distinct()),
    )
    return [h.pk for h in holds]


@dataclass(frozen=True)
class RuleRemoved:
    """A playbook rule the erasure takes out: its text (without its marks), the lessons it stood on
    that are not the person's (they stay, the rule goes with the person's lesson all the same)."""

    text: str
    lessons_of_others: tuple[str, ...]


@dataclass(frozen=True)
class SharedFileChange:
    """A memory file outside the person's scope (a playbook, a draft, an observation, a note written
    in one of their threads) that the erasure changes: rewritten, deleted, or versions redacted."""

    agent: str
    path: str
    scope: str
    versions_redacted: int
    deleted: bool
    rules_removed: tuple[RuleRemoved, ...]
    # Who promoted the playbook as it stands (its `playbook.promoted` audit record), "" when nobody did.
    promoted_by: str


@dataclass(frozen=True)
class SharedItemChange:
    """An item of another scope that stood on the person's words: purged, or trimmed of quotes."""

    agent: str
    item_id: str
    scope: str
    purged: bool


# How the confirm step names each group of mentions (memoryapp.forgetting.mentions.GROUPS).
GROUP_LABELS = {
    "entry": "turns of others, tool results, summaries and fork copies naming the person",
    "thread": "threads' metadata naming the person (fork copies included)",
    "item": "items and facts of others or of the whole agent naming the person",
    "entity": "entities named as the person, or with an alias naming them",
    "evidence": "quotes naming the person",
    "file_version": "memory files and context documents naming the person",
    "relation_evidence": "quotes an edge of the knowledge graph stands on naming the person",
    "knowledge_document": "knowledge documents naming the person (their chunks embedded again)",
    "run_event": "events of runs in threads of others naming the person (the run ledger)",
    "thread_run": "latest snapshots of runs in threads of others naming the person",
    "job_run": "job runs naming the person",
    "participants": "threads listing the person among their participants",
}
MENTION_KINDS = ("deleted", "redacted", "re_embedded")


@dataclass(frozen=True)
class MentionGroup:
    """One group of rows naming the person that the erasure changes: counted by kind, with a few
    row ids as examples; the officer may leave it out, with a reason."""

    group: str
    label: str
    counts: dict[str, int]
    examples: tuple[str, ...]


def mention_groups(counts: dict[str, int], examples: dict[str, list[str]]) -> list[MentionGroup]:
    """The groups of an erasure's counts (`mentions_<kind>_<group>`), in GROUPS order."""
    by_group: dict[str, dict[str, int]] = {}
    for key, n in counts.items():
        if not key.startswith("mentions_") or not n:
            continue
        rest = key.removeprefix("mentions_")
        kind = next((k for k in MENTION_KINDS if rest.startswith(k + "_")), "")
        if kind:
            by_group.setdefault(rest.removeprefix(kind + "_"), {})[kind] = n
    return [
        MentionGroup(group, GROUP_LABELS.get(group, group), by_group[group], tuple(examples.get(group, ())))
        for group in GROUPS
        if group in by_group
    ]


@dataclass
class ErasureDryRun:
    """What a request would do now, found by doing it (`erasure_steps`) and rolling it back: the counts
    its report will give, the legal holds that would stop it, and the memory shared with others it
    changes (files and items outside the person's scope)."""

    counts: dict[str, int]
    holds: list[int]
    shared_files: list[SharedFileChange] = field(default_factory=list)
    shared_items: list[SharedItemChange] = field(default_factory=list)
    mentions: list[MentionGroup] = field(default_factory=list)

    @property
    def nothing(self) -> bool:
        return not any(self.counts.values())


def erasure_steps(
    *,
    user_id: str,
    agent_ids: Sequence[int],
    mode: str,
    actor: str,
    progress: Any = None,
    identifiers: Sequence[str] = (),
    exclude: Sequence[str] | Mapping[str, str] = (),
    examples: dict[str, list[str]] | None = None,
) -> dict[str, int]:
    """What an erasure changes, and its counts (the report's): `person_erase`, then, erasing, the
    person's export archives (copies of what was erased). Both the job and its dry run run this.

    The request's other `identifiers` act: sorted into e-mails, phones, names and external ids
    (`identifiers_classified`), they join those each agent registered, and every row naming the
    person by one of them is erased or redacted (memoryapp.forgetting.mentions), except the groups
    the officer `exclude`d."""
    counts = person_erase(
        user_id=user_id,
        agent_ids=list(agent_ids) or None,
        mode=mode,
        actor=actor,
        progress=progress,
        unowned=True,  # staff's erasure: the runs of no agent that name the person go too
        identifiers=identifiers_classified(identifiers),
        exclude=exclude,
        examples=examples,
    )
    if mode == ErasureRequest.Mode.ERASE:
        with transaction.atomic():
            exported = exports_forget_person(user_id=user_id, actor=actor)
        counts = {**counts, "export_archives": exported["archives"]}
    return counts


def _scope_label(user_id: str, project_id: str, thread_id: str) -> str:
    parts = [f"{n} {v}" for n, v in (("person", user_id), ("project", project_id), ("thread", thread_id)) if v]
    return " / ".join(parts) or "agent-wide"


def _person_scope(user_id: str) -> Q:
    """The items of the person's own scope (`person_erase` takes them all): theirs, and their facts."""
    namespace = f"{PERSON_PREFIX}/{user_id}"
    return Q(user_id=user_id) | Q(namespace=namespace) | Q(namespace__startswith=namespace + "/")


def _others_items_quoting(user_id: str, agents: Sequence[int]) -> dict[str, int]:
    """Items outside the person's scope quoting the person's words: {id: quotes}, before the erasure."""
    words = Entry.objects.filter(_person_entries(user_id, agents)).values("pk")
    quoting = Evidence.objects.filter(entry_id__in=words).values("item_id")
    items = MemoryItem.objects.filter(pk__in=quoting).exclude(_person_scope(user_id))
    if agents:
        items = items.filter(agent_id__in=agents)
    return dict(items.annotate(quotes=Count("evidence")).values_list("pk", "quotes"))


def erasure_dry_run(
    *,
    user_id: str,
    agent_ids: Sequence[int] = (),
    mode: str = "erase",
    identifiers: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> ErasureDryRun:
    """Run the erasure's own steps (`erasure_steps`) in a transaction that is then rolled back: the
    counts are the ones the report will give, and what changed outside the person's scope is named.

    1. Note the items of others quoting the person, and the time.
    2. `erasure_steps`, as the job runs them, in an `audit_rehearsal` (locks included; its audit
       records are collected, not written, so no other audit write waits for the preview; no job is
       sent, no file removed: they wait for a commit that never comes).
    3. Still inside: which of those items went or lost quotes; which files outside the person's
       scope had versions redacted since step 1, and what each one's head reads now.
    4. Roll back. Then read the heads as they stand (again) and compare: the rules a playbook loses,
       the lessons of others those rules also stood on, and who had promoted it.
    """
    person = _text_check(user_id, field="user_id", max_chars=128)
    if mode not in ErasureRequest.Mode.values:
        raise DomainError("invalid_value", "`mode` is erase or redact.", field="mode")
    agents = _agents_check(agent_ids)
    holds = holds_in_the_way(user_id=person, agent_ids=agents)
    started = timezone.now()
    examples: dict[str, list[str]] = {}
    with audit_rehearsal():
        quoting = _others_items_quoting(person, agents)
        counts = erasure_steps(
            user_id=person,
            agent_ids=agents,
            mode=mode,
            actor="erasure:dry-run",
            identifiers=_identifiers_check(identifiers),
            exclude=exclude,
            examples=examples,
        )
        left = dict(
            MemoryItem.objects.filter(pk__in=list(quoting))
            .annotate(quotes=Count("evidence"))
            .values_list("pk", "quotes")
        )
        touched = (
            MemoryFileVersion.objects.filter(redacted_at__gte=started)
            .exclude(user_id=person)
            .values("agent_id", "user_id", "project_id", "thread_id", "path")
            .annotate(redacted=Count("pk"))
        )
        if agents:
            touched = touched.filter(agent_id__in=agents)
        files: list[dict[str, Any]] = []
        for row in touched:
            head = _file_head(row)
            files.append({**row, "after": None if head is None else head.content})
    slugs = dict(Agent.objects.values_list("pk", "slug"))
    items = []
    for item in MemoryItem.objects.filter(pk__in=list(quoting)).order_by("pk"):
        gone = item.pk not in left
        if gone or left[item.pk] < quoting[item.pk]:
            scope = _scope_label(item.user_id, item.project_id, item.thread_id)
            items.append(SharedItemChange(slugs.get(item.agent_id, "?"), item.pk, scope, purged=gone))
    purged = {i.item_id for i in items if i.purged}
    changed = [_shared_file_change(row, person=person, purged=purged, slugs=slugs) for row in files]
    changed.sort(key=lambda f: (f.agent, f.path, f.scope))
    return ErasureDryRun(
        counts=counts,
        holds=holds,
        shared_files=changed,
        shared_items=items,
        mentions=mention_groups(counts, examples),
    )


def _file_head(row: Mapping[str, Any]) -> MemoryFileVersion | None:
    """The newest version of the file a row of (agent, scope, path) names."""
    place = {key: row[key] for key in ("agent_id", "user_id", "project_id", "thread_id", "path")}
    return MemoryFileVersion.objects.filter(**place).order_by("-sequence").first()


def _shared_file_change(
    row: dict[str, Any], *, person: str, purged: set[str], slugs: dict[int, str]
) -> SharedFileChange:
    """What a file outside the person's scope loses: its head now (rolled back) against the head the
    dry run left."""
    head = _file_head(row)
    before = (head.content or "") if head is not None else ""
    after = row["after"]
    rules: list[RuleRemoved] = []
    promoted_by = ""
    if row["path"] in (PLAYBOOK_PATH, PLAYBOOK_DRAFT_PATH) and after is not None:
        kept = set((after or "").splitlines())
        lessons = [line for line in before.splitlines() if line.startswith("- ") and line not in kept]
        cited = {lesson for line in lessons for lesson in rule_lessons(line)}
        # The lessons that go with the person: theirs, and those of others purged with their words.
        of_person = purged | set(
            MemoryItem.objects.filter(_person_scope(person), pk__in=cited).values_list("pk", flat=True)
        )
        rules = [
            RuleRemoved(rule_body(line.removeprefix("- ")), tuple(i for i in rule_lessons(line) if i not in of_person))
            for line in lessons
        ]
        if head is not None:
            promotion = AuditRecord.objects.filter(action="playbook.promoted", subject=head.pk).first()
            promoted_by = promotion.actor if promotion is not None else ""
    return SharedFileChange(
        agent=slugs.get(row["agent_id"], "?"),
        path=row["path"],
        scope=_scope_label(row["user_id"], row["project_id"], row["thread_id"]),
        versions_redacted=row["redacted"],
        deleted=after is None and head is not None and head.content is not None,
        rules_removed=tuple(rules),
        promoted_by=promoted_by,
    )


def erasure_preview(
    *, user_id: str, agent_ids: Sequence[int] = (), mode: str = "erase", identifiers: Sequence[str] = ()
) -> ErasureDryRun:
    """What the form shows before a request is filed: its dry run (`erasure_dry_run`). Changes nothing."""
    return erasure_dry_run(user_id=user_id, agent_ids=agent_ids, mode=mode, identifiers=identifiers)


def _job_send(request: ErasureRequest) -> JobRun:
    run = job_enqueue(
        kind=JOB_KIND,
        task_name=JOB_TASK,
        arguments={"request_id": request.pk},
        dedupe_key=f"erasure:{request.pk}",
    )
    ErasureRequest.objects.filter(pk=request.pk).update(job_run=run)
    request.job_run = run
    return run


def erasure_request_stalled(request: ErasureRequest) -> bool:
    """True when the request says it is queued or running but its job run ended without it: its
    worker was killed past the job's time limit, or died too often (`governance.jobs`). The request
    could not say so itself; it may be run again."""
    if request.status not in (Status.QUEUED, Status.RUNNING) or request.job_run_id is None:
        return False
    return JobRun.objects.filter(
        pk=request.job_run_id, status__in=[JobRun.Status.FAILED, JobRun.Status.SKIPPED, JobRun.Status.SUCCEEDED]
    ).exists()


@transaction.atomic
def erasure_request_retry(*, request: ErasureRequest, actor: str, due_at: datetime | None = None) -> ErasureRequest:
    """Run a failed, blocked or stalled request again (a new job run). It finishes the work:
    person_erase takes what is left, and the report counts what this run found.

    `due_at` (the beat's automatic retry): run it only if its automatic retry is due at that time,
    decided here, under the row's lock, from the request as it stands: a request the officer ran
    again meanwhile, and that failed again, waits for its next wait (a conflict otherwise)."""
    locked = ErasureRequest.objects.select_for_update().filter(pk=request.pk).first()
    if locked is None:
        raise DomainError("not_found", f"Erasure request #{request.pk} no longer exists.")
    if locked.status not in RETRYABLE and not erasure_request_stalled(locked):
        raise DomainError(
            "conflict",
            f"Erasure request #{locked.pk} is {locked.status}: only a failed or blocked one (or one whose job "
            "run ended without it) is run again.",
        )
    if due_at is not None:
        retry = erasure_auto_retry(locked)
        if retry is None or retry.due is None or retry.due > due_at:
            raise DomainError("conflict", f"Erasure request #{locked.pk} is not due to be run again automatically.")
    before = locked.status
    ErasureRequest.objects.filter(pk=locked.pk).update(
        status=Status.QUEUED, phase="", error="", blocked_by=[], finished_at=None
    )
    audit_append(
        action="erasure.retry",
        actor=actor,
        subject=str(locked.pk),
        outcome="queued",
        details={"request": locked.pk, "was": before},
    )
    locked.refresh_from_db()
    _job_send(locked)
    return locked


@dataclass(frozen=True)
class AutoRetry:
    """Whether a failed request is run again automatically, and when (`erasure_auto_retry`): `due`
    the time of the next try (None: none), `attempt` its number among AUTO_RETRY_WAITS, `why_not`
    what the request's page says when there is none."""

    due: datetime | None
    attempt: int
    why_not: str


def _attempts_failed(request: ErasureRequest) -> int:
    """The request's job runs that failed (its first run, and each run again, automatic or not)."""
    return JobRun.objects.filter(kind=JOB_KIND, arguments__request_id=request.pk, status=JobRun.Status.FAILED).count()


def erasure_auto_retry(request: ErasureRequest) -> AutoRetry | None:
    """A failed request's automatic retry (None for a request not failed). An error that passes by
    itself (TRANSIENT_ERRORS: the database restarted, a connection cut, the time limit) is run again
    after AUTO_RETRY_WAITS[n] from its failure, at most len(AUTO_RETRY_WAITS) times, counted by its
    failed job runs: the erasure is idempotent and takes what is left. Any other error would fail
    the same way again at every try (a defect, a row its key cannot open, a check refusing): the
    officer runs it again once its cause is fixed, and the page says so."""
    if request.status != Status.FAILED:
        return None
    kind = (request.error or "").split(":", 1)[0].strip()
    if kind not in TRANSIENT_ERRORS:
        return AutoRetry(
            None,
            0,
            f"Not run again automatically: {kind or 'its error'} is not an error that passes by itself (the "
            "database or a connection down, the time limit), so it would fail the same way again. Run it again "
            "once its cause is fixed.",
        )
    failed = max(_attempts_failed(request), 1)
    if failed > len(AUTO_RETRY_WAITS):
        return AutoRetry(
            None,
            failed,
            f"Not run again automatically any more: it failed {failed} times ({len(AUTO_RETRY_WAITS)} automatic "
            "retries). Run it again once the cause is fixed.",
        )
    since = request.finished_at or request.created_at
    return AutoRetry(since + AUTO_RETRY_WAITS[failed - 1], failed, "")


def _run_lost_why(run: JobRun) -> str:
    """The request's error for a job run that stopped without finishing it (`erasure_request_lost`):
    its kind first, as TRANSIENT_ERRORS names it, so the automatic retry applies."""
    if run.status == JobRun.Status.FAILED and (run.error or "").startswith("time limit of"):
        return f"TimeLimitExceeded: job run #{run.pk} was stopped by the worker past its time limit ({run.error})"
    return (
        f"WorkerLostError: job run #{run.pk} stopped without finishing it (its worker killed, out of memory, its "
        f"machine restarted, or its connection to the database lost){f': {run.error}' if run.error else ''}"
    )


def erasure_request_lost(request_id: int, run_id: int) -> bool:
    """Fail a queued or running request whose job run is no longer running, as a transient error
    (TRANSIENT_ERRORS): the automatic retry then runs it again, bounded, after its wait. True when
    it was so failed.

    A run no longer running: ended (failed past its time limit, or after its worker died
    LOST_RUN_MAX_ATTEMPTS times: governance.jobs), or `running` with its lock free. The process
    running a job holds the run's session advisory lock (governance.jobs.runs) until it ends, and
    PostgreSQL frees it when that process dies (SIGKILL, out of memory, a machine restarted): a
    free lock is a dead run, never a slow one; time alone decides nothing. The lock is taken here,
    as the job sweep takes it, so no process claims the run while it is failed. A queued run is
    left alone (it waits for a worker: the job sweep sends it again), and so is a live one."""
    status = JobRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None or status == JobRun.Status.QUEUED:
        return False
    if not run_lock_try(run_id):
        return False  # its process is alive
    try:
        with transaction.atomic():
            locked = (
                ErasureRequest.objects.select_for_update()
                .filter(pk=request_id, status__in=(Status.QUEUED, Status.RUNNING), job_run_id=run_id)
                .first()
            )
            run = JobRun.objects.filter(pk=run_id).first()
            if locked is None or run is None or run.status == JobRun.Status.QUEUED:
                return False
            if run.status == JobRun.Status.RUNNING:
                job_fail(run, "the process running it stopped (its run's lock was free): failed for the request")
            error = _run_lost_why(run)
            was = locked.status
            _update(locked, status=Status.FAILED, phase="", error=error[:2000], finished_at=timezone.now())
            audit_append(
                action="erasure.failed",
                actor=f"erasure:{locked.pk}",
                subject=str(locked.pk),
                outcome="failed",
                details={"request": locked.pk, "error": error.split(":", 1)[0], "job_run": run_id, "was": was},
            )
        return True
    finally:
        run_lock_release(run_id)


def erasure_requests_lost() -> int:
    """The beat's look at queued and running requests: each whose job run is no longer running is
    failed as a transient error (`erasure_request_lost`), then retried as any such failure (the
    next tick after its wait). Answers how many."""
    open_requests = ErasureRequest.objects.filter(
        status__in=(Status.QUEUED, Status.RUNNING), job_run__isnull=False
    ).order_by("pk")
    return sum(1 for pk, run_id in open_requests.values_list("pk", "job_run_id") if erasure_request_lost(pk, run_id))


def erasure_requests_retry_due(*, now: datetime | None = None) -> int:
    """The beat's automatic retries (`erasure_auto_retry`): each failed request whose retry is due
    is run again (`erasure_request_retry`, audited `erasure.retry` by AUTO_RETRY_ACTOR). Answers how many."""
    now = now or timezone.now()
    sent = 0
    for request in ErasureRequest.objects.filter(status=Status.FAILED).order_by("pk"):
        retry = erasure_auto_retry(request)
        if retry is None or retry.due is None or retry.due > now:
            continue
        try:
            # Due on this read; decided again under the row's lock (an officer may have run it
            # again since, and it may have failed again: then it waits for its next wait).
            erasure_request_retry(request=request, actor=AUTO_RETRY_ACTOR, due_at=now)
        except DomainError:
            continue  # run again meanwhile by an officer, or no longer due
        sent += 1
    return sent


# --- probes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """What the leftover scan looks for: a name that says which (never the text), the text, and
    whether it must stand as a whole word (ids: `u-1` is not found inside `u-10`)."""

    name: str
    needle: str
    whole_word: bool


# A stretch of text a sample may be cut from: no quotes, backslashes or control characters, so it
# reads the same in a text column and in the JSON of a content column.
_SAFE_STRETCH = re.compile(r"[^\"\\\x00-\x1f]{" + str(SAMPLE_MIN_CHARS) + ",}")


def sample_of(text: str) -> str | None:
    """A distinctive piece of `text`: from the middle of its longest safe stretch, whole words,
    SAMPLE_MIN_CHARS to SAMPLE_MAX_CHARS long; None when it has no such piece."""
    stretches = _SAFE_STRETCH.findall(text or "")
    if not stretches:
        return None
    stretch = max(stretches, key=len).strip()
    if len(stretch) > SAMPLE_MAX_CHARS:
        start = (len(stretch) - SAMPLE_MAX_CHARS) // 2
        space = stretch.find(" ", start)
        start = space + 1 if 0 <= space < start + SAMPLE_MAX_CHARS // 2 else start
        piece = stretch[start : start + SAMPLE_MAX_CHARS]
        end = piece.rfind(" ")
        if end >= SAMPLE_MIN_CHARS:
            piece = piece[:end]
        stretch = piece.strip()
    return stretch if len(stretch) >= SAMPLE_MIN_CHARS else None


def _person_entries(user_id: str, agent_ids: Sequence[int]) -> Q:
    """The entries about the person: those of their threads, and the messages they wrote elsewhere."""
    about = Q(thread__user_id=user_id) | (Q(role=Role.USER) & sent_by(user_id))
    return about & Q(agent_id__in=agent_ids) if agent_ids else about


def probes_take(*, request: ErasureRequest) -> list[Probe]:
    """The probes of a request, taken before anything is erased: its ids, and up to SAMPLES_MAX
    samples cut from a random choice of the person's messages and tool results."""
    probes = [Probe(ID_PROBE, request.user_id, True)]
    probes += [Probe(f"identifier {n}", text, True) for n, text in enumerate(request.identifiers or [], start=1)]
    # The identifiers the agents registered for the person (sealed: opened here), and the
    # client-chosen ids of the person's threads: both go with the erasure, so taken now.
    given = {p.needle.lower() for p in probes}
    registered = PersonIdentifier.objects.filter(user_id=request.user_id)
    threads = Thread.objects.filter(user_id=request.user_id)
    if request.agent_ids:
        registered = registered.filter(agent_id__in=request.agent_ids)
        threads = threads.filter(agent_id__in=request.agent_ids)
    values = sorted({i.value for i in registered.only("id", "agent_id", "user_id", "value")} - given)
    probes += [
        Probe(f"registered identifier {n}", text, True)
        for n, text in enumerate((v for v in values if len(v) >= IDENTIFIER_MIN_CHARS), start=1)
    ]
    thread_ids = sorted(set(threads.values_list("external_id", flat=True)) - given - set(values))
    probes += [Probe(f"{THREAD_PROBE}{n}", text, True) for n, text in enumerate(thread_ids, start=1) if text]
    texts = (
        Entry.objects.filter(_person_entries(request.user_id, request.agent_ids))
        .filter(type__in=[EntryType.MESSAGE, EntryType.TOOL_RESULT])
        .exclude(text="")
        .order_by("?")
        .values_list("text", flat=True)[:SAMPLE_ENTRIES_LOOKED_AT]
    )
    seen: set[str] = {p.needle.lower() for p in probes}
    samples: list[str] = []
    for text in texts:
        piece = sample_of(text)
        if piece is None or piece.lower() in seen or REDACTED_TEXT.lower() in piece.lower():
            continue
        seen.add(piece.lower())
        samples.append(piece)
        if len(samples) >= SAMPLES_MAX:
            break
    return probes + [Probe(f"sample {n}", piece, False) for n, piece in enumerate(samples, start=1)]


def agents_holding(*, user_id: str, agent_ids: Sequence[int]) -> list[int]:
    """The agents that hold something about the person (their threads, messages, items, files)."""
    scope = Q(agent_id__in=agent_ids) if agent_ids else Q()
    found: set[int] = set()
    found |= set(Thread.objects.filter(scope, user_id=user_id).values_list("agent_id", flat=True).distinct())
    found |= set(
        Entry.objects.filter(scope, sent_by(user_id), role=Role.USER).values_list("agent_id", flat=True).distinct()
    )
    found |= set(MemoryItem.objects.filter(scope, user_id=user_id).values_list("agent_id", flat=True).distinct())
    found |= set(MemoryFileVersion.objects.filter(scope, user_id=user_id).values_list("agent_id", flat=True).distinct())
    return sorted(found)


# --- the leftover scan --------------------------------------------------------------------------

_TEXT_FIELDS = (models.CharField, models.TextField, models.JSONField)


@dataclass(frozen=True)
class ScannedTable:
    label: str  # app_label.model
    table: str
    pk: str
    columns: tuple[str, ...]
    agent_column: str | None  # filter by agent on this column (None: see `via_webhook`, or every row)
    agent_null_too: bool = False  # rows of no agent are scanned too (job runs)
    via_webhook: bool = False  # webhook deliveries: the agent is their webhook's
    # The columns sealed at rest (a subset of `columns`), each with whether it is JSON: the SQL
    # pass skips their sealed values, which `_sealed_matches` opens and searches.
    sealed: tuple[tuple[str, bool], ...] = ()
    # The array columns (of ids: the access log's), also searched for the ids of the rows erased.
    arrays: tuple[str, ...] = ()


def _scanned_column(f: models.Field[Any, Any]) -> bool:
    """Text, JSON and arrays (of text) are scanned; a column of fixed values (choices) is not."""
    if isinstance(f, ArrayField):
        return isinstance(f.base_field, _TEXT_FIELDS) and bool(f.column)
    return isinstance(f, _TEXT_FIELDS) and not f.choices and bool(f.column)


def tables_to_scan() -> list[ScannedTable]:
    """Every table of the service's models (every app: memoryapp, governance, Django's admin log and
    users) but NOT_SCANNED: their text, JSON and array columns, found from the models so a new column
    or table is scanned without being listed."""
    found: list[ScannedTable] = []
    for model in apps.get_models():
        meta = model._meta
        if meta.proxy or not meta.managed or meta.label_lower in NOT_SCANNED:
            continue
        columns = tuple(f.column for f in meta.concrete_fields if _scanned_column(f) and f.column)
        if not columns:
            continue
        fields = {f.name: f for f in meta.concrete_fields}
        agent = fields.get("agent") or fields.get("agent_id")
        sealed = tuple(
            (f.column, isinstance(f, SealedJSONField))
            for f in meta.concrete_fields
            if isinstance(f, (SealedTextField, SealedJSONField)) and f.column in columns
        )
        found.append(
            ScannedTable(
                label=meta.label_lower,
                table=meta.db_table,
                pk=str(meta.pk.column) if meta.pk else "id",
                columns=columns,
                agent_column="agent_id" if agent is not None else None,
                # Rows of no agent (job runs, staff's audit records, holds on every agent) too.
                agent_null_too=agent is not None and bool(agent.null),
                via_webhook=model is WebhookDelivery,
                sealed=sealed,
                arrays=tuple(
                    f.column
                    for f in meta.concrete_fields
                    if isinstance(f, ArrayField) and isinstance(f.base_field, _TEXT_FIELDS) and f.column
                ),
            )
        )
    return sorted(found, key=lambda t: t.table)


# Why a column of a type that holds no text is not scanned (information_schema's data_type).
_TYPE_REASONS: dict[str, str] = {
    "integer": "a number",
    "bigint": "a number",
    "smallint": "a number",
    "numeric": "a number",
    "real": "a number",
    "double precision": "a number",
    "boolean": "a flag",
    "date": "a date",
    "timestamp with time zone": "a time",
    "timestamp without time zone": "a time",
    "interval": "a duration",
    "uuid": "a uuid (random)",
    "bytea": "bytes",
    "inet": "an address",
    "vector": "a vector: numbers, no text (counted with its row)",
    "bit varying": "a vector's sign bits: no text (counted with the vector's row)",
    "tsvector": "the search index of the row's text, generated from its text columns (scanned)",
}


def scan_coverage(tables: Sequence[ScannedTable]) -> list[dict[str, str]]:
    """Every column of every table of the database: `scanned` (and `opened` when sealed at rest),
    or why not (its table is not scanned, a number, a time, a vector, fixed values...)."""
    by_table = {t.table: t for t in tables}
    reasons = {apps.get_model(label)._meta.db_table: why for label, why in NOT_SCANNED.items()}
    choices: set[tuple[str, str]] = set()
    links: dict[tuple[str, str], str] = {}
    for model in apps.get_models():
        for f in model._meta.concrete_fields:
            if getattr(f, "choices", None) and f.column:
                choices.add((model._meta.db_table, f.column))
            if f.is_relation and f.related_model is not None and f.column:
                related = f.related_model._meta.db_table  # type: ignore[union-attr]
                links[(model._meta.db_table, f.column)] = f"a link: the id of a row of {related}"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.table_name, c.column_name, c.data_type, c.udt_name FROM information_schema.columns c"
            " JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
            " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
            " ORDER BY c.table_name, c.ordinal_position"
        )
        rows = cursor.fetchall()
    coverage: list[dict[str, str]] = []
    for table, column, data_type, udt in rows:
        scanned = by_table.get(table)
        if scanned is not None and column in scanned.columns:
            sealed = column in dict(scanned.sealed)
            coverage.append({"table": table, "column": column, "scanned": "opened" if sealed else "yes"})
            continue
        if table in reasons:
            why = f"table not scanned: {reasons[table]}"
        elif table in NOT_MODELS:
            why = f"table not scanned: {NOT_MODELS[table]}"
        elif (
            scanned is None and table not in by_table and not any(m._meta.db_table == table for m in apps.get_models())
        ):
            why = "table not scanned: no model of the service (unknown table)"
        elif (table, column) in choices:
            why = "one of fixed values (choices)"
        elif (table, column) in links:
            why = links[(table, column)]
        elif data_type == "ARRAY" and udt in ("_int2", "_int4", "_int8", "_float4", "_float8"):
            why = "an array of numbers (keyed hashes, counts)"
        else:
            kind = udt if data_type == "USER-DEFINED" else data_type
            why = _TYPE_REASONS.get(kind, f"not scanned: a column of type {kind}")
        coverage.append({"table": table, "column": column, "scanned": "no", "why": why})
    return coverage


def _ids_pattern(needle: str) -> str:
    """A PostgreSQL regular expression finding `needle` (lower-cased by the query) as a whole word."""
    escaped = "".join(c if c.isalnum() else "\\" + c for c in needle)
    # Ids are made of letters, digits and `_ - @`: `u-1` is not found in `u-10` nor in `u-1-x`;
    # a dot ends a word (an id at the end of a sentence is found; `a@b.org` in `a@b.org.uk` too).
    return f"(^|[^[:alnum:]_@-]){escaped}($|[^[:alnum:]_@-])"


def _scope(table: ScannedTable, *, agent_ids: Sequence[int]) -> sql.Composable:
    """The rows of the chosen agents (every row when no agent is chosen)."""
    if not agent_ids:
        return sql.SQL("TRUE")
    if table.agent_column:
        column = sql.Identifier("t", table.agent_column)
        if table.agent_null_too:
            return sql.SQL("({c} = ANY(%(agents)s) OR {c} IS NULL)").format(c=column)
        return sql.SQL("{} = ANY(%(agents)s)").format(column)
    if table.via_webhook:
        return sql.SQL("t.webhook_id IN (SELECT id FROM memoryapp_webhook WHERE agent_id = ANY(%(agents)s))")
    return sql.SQL("TRUE")


def _scan_query(table: ScannedTable, *, agent_ids: Sequence[int]) -> sql.Composed:
    """Rows of the table (in scope) whose text columns hold a probe, with the probes' numbers.

    1. The probes are lower-cased once (`p`), and made into LIKE patterns (`likes`).
    2. Each row's text and JSON columns are joined and lower-cased once (`OFFSET 0` keeps the
       planner from computing it twice), and kept when it is LIKE any probe: one pass of C string
       search per row, which is all that most rows (nothing left of the person) cost.
    3. For the rows kept, which probes: found with strpos, an id probe also as a whole word (a
       regular expression).
    A sealed value is left out (NULL): its ciphertext is no leftover, its text is `_sealed_matches`'.
    """
    sealed = dict(table.sealed)
    doc = sql.SQL("lower(concat_ws(chr(31), {}))").format(
        sql.SQL(", ").join(
            _unsealed(c, json_value=sealed[c]) if c in sealed else sql.SQL("{}::text").format(sql.Identifier("t", c))
            for c in table.columns
        )
    )
    return sql.SQL(
        "WITH p AS MATERIALIZED ("
        "  SELECT lower(u.needle) AS needle, lower(u.pattern) AS pattern, u.n"
        "  FROM unnest(%(needles)s::text[], %(patterns)s::text[]) WITH ORDINALITY AS u(needle, pattern, n)"
        "), likes AS MATERIALIZED ("
        "  SELECT array_agg('%%' || replace(replace(replace(p.needle, chr(92), chr(92) || chr(92)),"
        "                   '%%', chr(92) || '%%'), '_', chr(92) || '_') || '%%') AS patterns FROM p"
        ") "
        "SELECT s.pk, m.matched FROM ("
        "  SELECT d.pk, d.doc FROM ("
        "    SELECT {pk}::text AS pk, {doc} AS doc FROM {table} AS t WHERE {scope} OFFSET 0"
        "  ) AS d WHERE d.doc LIKE ANY ((SELECT likes.patterns FROM likes)::text[])"
        ") AS s CROSS JOIN LATERAL ("
        "  SELECT array_agg(p.n ORDER BY p.n) AS matched FROM p"
        "  WHERE strpos(s.doc, p.needle) > 0 AND (p.pattern = '' OR s.doc ~ p.pattern)"
        ") AS m WHERE m.matched IS NOT NULL ORDER BY s.pk"
    ).format(
        pk=sql.Identifier("t", table.pk),
        doc=doc,
        table=sql.Identifier(table.table),
        scope=_scope(table, agent_ids=agent_ids),
    )


def _sealed_test(column: str, *, json_value: bool) -> sql.Composed:
    """Whether the column of the row `t` holds a sealed value (a JSON one is a JSON string)."""
    prefix = '"' + SEALED_PREFIX if json_value else SEALED_PREFIX
    return sql.SQL("left({}::text, {}) = {}").format(
        sql.Identifier("t", column), sql.Literal(len(prefix)), sql.Literal(prefix)
    )


def _unsealed(column: str, *, json_value: bool) -> sql.Composed:
    """The column's text for the SQL pass: NULL when sealed."""
    return sql.SQL("CASE WHEN {} THEN NULL ELSE {}::text END").format(
        _sealed_test(column, json_value=json_value), sql.Identifier("t", column)
    )


def _sealed_rows_query(table: ScannedTable, *, agent_ids: Sequence[int], after: bool) -> sql.Composed:
    """A batch of the rows (in scope, in key order, after %(after)s when `after`) holding a sealed value."""
    condition = sql.SQL(" OR ").join(_sealed_test(c, json_value=j) for c, j in table.sealed)
    keyset = sql.SQL("AND {} > %(after)s").format(sql.Identifier("t", table.pk)) if after else sql.SQL("")
    return sql.SQL(
        "SELECT {pk}, {pk}::text, {columns} FROM {table} AS t WHERE {scope} AND ({condition}) {keyset}"
        " ORDER BY {pk} LIMIT %(batch)s"
    ).format(
        pk=sql.Identifier("t", table.pk),
        columns=sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier("t", c)) for c, _ in table.sealed),
        table=sql.Identifier(table.table),
        scope=_scope(table, agent_ids=agent_ids),
        condition=condition,
        keyset=keyset,
    )


def _probe_patterns(probes: Sequence[Probe]) -> list[tuple[str, re.Pattern[str] | None]]:
    """Each probe lower-cased, with the whole-word expression of an id probe (as `_ids_pattern`)."""
    return [
        (
            p.needle.lower(),
            re.compile(r"(?:^|[^\w@-])" + re.escape(p.needle.lower()) + r"(?:$|[^\w@-])") if p.whole_word else None,
        )
        for p in probes
    ]


def _sealed_matches(
    cursor: Any, table: ScannedTable, *, probes: Sequence[Probe], agent_ids: Sequence[int]
) -> tuple[dict[str, set[int]], int]:
    """The rows whose sealed values, opened, hold a probe (row id -> probe numbers), and how many
    rows hold a value that no longer opens (its data key destroyed: shredded, so no leftover).

    Steps: read the rows holding a sealed value a batch at a time in key order; open each value
    (a JSON one to its JSON text, as the SQL pass reads JSON); join them as the SQL pass joins
    columns, lower-cased; look for each probe as the SQL pass does."""
    patterns = _probe_patterns(probes)
    matches: dict[str, set[int]] = {}
    unreadable = 0
    last: Any = None
    while True:
        query = _sealed_rows_query(table, agent_ids=agent_ids, after=last is not None)
        params = {"agents": list(agent_ids), "after": last, "batch": SEALED_SCAN_BATCH}
        cursor.execute(query.as_string(cursor.connection), params)
        rows = cursor.fetchall()
        for _key, pk, *values in rows:
            try:
                texts = [
                    json_text_open(v, table=table.table, column=c) if j else value_open(v, table=table.table, column=c)
                    for (c, j), v in zip(table.sealed, values, strict=True)
                    if v is not None
                ]
            except SealError:
                unreadable += 1
                continue
            doc = chr(31).join(texts).lower()
            found = {
                n
                for n, (needle, word) in enumerate(patterns, start=1)
                if needle in doc and (word is None or word.search(doc))
            }
            if found:
                matches[pk] = found
        if len(rows) < SEALED_SCAN_BATCH:
            return matches, unreadable
        last = rows[-1][0]


def _count_query(table: ScannedTable, *, agent_ids: Sequence[int]) -> sql.Composed:
    return sql.SQL("SELECT count(*) FROM {} AS t WHERE {}").format(
        sql.Identifier(table.table), _scope(table, agent_ids=agent_ids)
    )


def _ids_only(names: Sequence[str]) -> bool:
    """Matched by the person's user id or their threads' ids alone (what a redaction keeps)."""
    return all(n == ID_PROBE or n.startswith(THREAD_PROBE) for n in names)


def _arrays_holding(cursor: Any, table: ScannedTable, *, ids: Sequence[str], agent_ids: Sequence[int]) -> list[str]:
    """The rows (in scope) whose array columns hold one of `ids` (`&&`: the GIN indexes answer)."""
    query = sql.SQL("SELECT {pk}::text FROM {table} AS t WHERE {scope} AND ({overlap}) ORDER BY 1").format(
        pk=sql.Identifier("t", table.pk),
        table=sql.Identifier(table.table),
        scope=_scope(table, agent_ids=agent_ids),
        overlap=sql.SQL(" OR ").join(
            sql.SQL("{} && %(ids)s::varchar[]").format(sql.Identifier("t", c)) for c in table.arrays
        ),
    )
    cursor.execute(query.as_string(cursor.connection), {"agents": list(agent_ids), "ids": list(ids)})
    return [pk for (pk,) in cursor.fetchall()]


def erased_ids_take(*, request: ErasureRequest) -> list[str]:
    """The ids of the person's entries and items (of their scope), taken before the erasure: after
    it, an array column still holding one (the access log's) is a leftover (probe "erased row id")."""
    entries = Entry.objects.filter(_person_entries(request.user_id, request.agent_ids)).values_list("pk", flat=True)
    items = MemoryItem.objects.filter(_person_scope(request.user_id))
    if request.agent_ids:
        items = items.filter(agent_id__in=request.agent_ids)
    return sorted({*entries[:ERASED_IDS_MAX], *items.values_list("pk", flat=True)[:ERASED_IDS_MAX]})


def leftovers_scan(
    *,
    probes: Sequence[Probe],
    agent_ids: Sequence[int],
    redaction: bool = False,
    erased_ids: Sequence[str] = (),
) -> dict[str, Any]:
    """Search every table holding content (`tables_to_scan`), within the agents (all when empty),
    for the probes: per table the rows looked at and the rows found; each finding is the table, the
    row id and the names of the probes it matched. Never the content.

    After a redaction (`redaction`), a row of REDACTION_KEEPS matched by the user id alone is
    counted and listed as `kept` (the redaction keeps it on purpose), not as found.
    """
    params: dict[str, Any] = {
        "agents": list(agent_ids),
        "needles": [p.needle for p in probes],
        "patterns": [_ids_pattern(p.needle) if p.whole_word else "" for p in probes],
    }
    tables: list[dict[str, Any]] = []
    findings: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    bookkeeping: list[dict[str, Any]] = []
    found_total = kept_total = unreadable_total = booked = 0
    scanned_tables = tables_to_scan()
    with connection.cursor() as cursor:
        for table in scanned_tables:
            cursor.execute(_count_query(table, agent_ids=agent_ids).as_string(cursor.connection), params)
            row = cursor.fetchone()
            rows = int(row[0]) if row else 0
            cursor.execute(_scan_query(table, agent_ids=agent_ids).as_string(cursor.connection), params)
            matches: dict[str, set[int]] = {pk: set(matched) for pk, matched in cursor.fetchall()}
            unreadable = 0
            if table.sealed:
                opened, unreadable = _sealed_matches(cursor, table, probes=probes, agent_ids=agent_ids)
                for pk, numbers in opened.items():
                    matches.setdefault(pk, set()).update(numbers)
            if table.arrays and erased_ids:
                for pk in _arrays_holding(cursor, table, ids=erased_ids, agent_ids=agent_ids):
                    matches.setdefault(pk, set()).add(len(probes) + 1)
            unreadable_total += unreadable
            found = kept_here = booked_here = 0
            for pk in sorted(matches):
                names = [probes[n - 1].name if n <= len(probes) else ERASED_ID_PROBE for n in sorted(matches[pk])]
                purpose = KEPT_ON_PURPOSE.get(table.table)
                if redaction and table.table in REDACTION_KEEPS and _ids_only(names):
                    purpose = (
                        "the redaction keeps the person's threads, entries' places, files' versions and the key of"
                        " their pseudonyms"
                    )
                if purpose is not None:
                    kept_here += 1
                    if kept_here <= FINDINGS_LISTED_PER_TABLE:
                        kept.append({"table": table.table, "row": pk, "probes": names, "why": purpose})
                    continue
                if table.table in BOOKKEEPING:
                    booked += 1
                    booked_here += 1
                    if booked_here <= FINDINGS_LISTED_PER_TABLE:
                        bookkeeping.append({"table": table.table, "row": pk, "probes": names})
                    continue
                found += 1
                if found <= FINDINGS_LISTED_PER_TABLE:
                    findings.append({"table": table.table, "row": pk, "probes": names})
            found_total += found
            kept_total += kept_here
            tables.append(
                {
                    "table": table.table,
                    "columns": list(table.columns),
                    "sealed_columns": [c for c, _ in table.sealed],
                    "rows": rows,
                    "found": found + booked_here,
                    "kept": kept_here,
                    # Rows holding a sealed value whose key was destroyed (crypto-shredded): unreadable.
                    "unreadable": unreadable,
                }
            )
    files = files_scan(probes=probes)
    found_total += files["found"]
    return {
        "tables": tables,
        "not_scanned": {
            **{apps.get_model(label)._meta.db_table: why for label, why in NOT_SCANNED.items()},
            **NOT_MODELS,
        },
        # Every column of every table: scanned, or why not.
        "coverage": scan_coverage(scanned_tables),
        "kept_on_purpose": dict(KEPT_ON_PURPOSE),
        "bookkeeping_tables": dict(BOOKKEEPING),
        "bookkeeping": bookkeeping,
        "bookkeeping_found": booked,
        # Ids of the person's entries and items taken before the erasure, looked for in array columns.
        "erased_ids_looked_for": len(erased_ids),
        # Files under VAR_DIR (logs, export archives opened, anchors...): searched the same way.
        "files": files,
        "findings": findings,
        "found": found_total,
        "kept": kept,
        "kept_total": kept_total,
        # Sealed values no key opens any more (crypto-shredded): nobody can read them, here or in a copy.
        "unreadable_total": unreadable_total,
        "listed_per_table_at_most": FINDINGS_LISTED_PER_TABLE,
    }


# --- the job ------------------------------------------------------------------------------------


def report_sha256(report: dict[str, Any]) -> str:
    """The sha256 of the report's canonical JSON (sorted keys, no spaces): what the audit chain holds."""
    return hashlib.sha256(canonical_json(report).encode()).hexdigest()


def _update(request: ErasureRequest, **fields: Any) -> None:
    ErasureRequest.objects.filter(pk=request.pk).update(**fields)
    for name, value in fields.items():
        setattr(request, name, value)


def _blocked(request: ErasureRequest, *, actor: str, ids: list[int]) -> bool:
    """Stop at legal holds on the person or one of their threads (`ids`, read under the erasure's
    locks: `erasure_gate`), before anything changes."""
    if not ids:
        return False
    with transaction.atomic():
        _update(
            request,
            status=Status.BLOCKED,
            phase="",
            blocked_by=ids,
            finished_at=timezone.now(),
            error=f"Stopped before changing anything: legal hold{'s' if len(ids) > 1 else ''} "
            + ", ".join(f"#{i}" for i in ids)
            + " in force.",
        )
        audit_append(
            action="erasure.blocked",
            actor=actor,
            subject=str(request.pk),
            outcome="blocked",
            details={"request": request.pk, "holds": ids},
        )
    return True


def erasure_run(*, request_id: int, run: JobRun | None = None) -> dict[str, Any]:
    """The erasure job's body (the module's step 2); returns the counts and the report's sha256.

    Guarded on the request's status: a done request is left as it is; a blocked one is not run
    (a retry queues it first); a running one (its worker died) runs again from what is left.
    """
    request = ErasureRequest.objects.filter(pk=request_id).first()
    if request is None:
        return {"skipped": "no such request"}
    if request.status not in (Status.QUEUED, Status.RUNNING):
        return {"skipped": f"request is {request.status}"}
    actor = f"erasure:{request.pk}"
    _update(request, status=Status.RUNNING, started_at=request.started_at or timezone.now(), phase="holds")
    try:
        # The person's erasure lock, then the holds read (the rule of memoryapp.subjects.erasing step
        # 6): a hold committed before the read is read here, and one placed after is told it came too
        # late. Held until the erasure's last change.
        with erasure_gate(
            user_id=request.user_id,
            agent_ids=request.agent_ids or None,
            holds=lambda: holds_in_the_way(user_id=request.user_id, agent_ids=request.agent_ids),
        ) as gate:
            if _blocked(request, actor=actor, ids=gate.holds):
                return {"blocked_by": request.blocked_by}
            _update(request, phase="sampling")
            began = time.perf_counter()
            probes = probes_take(request=request)
            erased_ids = erased_ids_take(request=request) if request.mode == ErasureRequest.Mode.ERASE else []
            holding = agents_holding(user_id=request.user_id, agent_ids=request.agent_ids)
            seconds = {"sampling": time.perf_counter() - began}
            _update(request, phase="erasing", progress_done=0, progress_total=None)
            began = time.perf_counter()

            with rows_tallied() as tally:

                def progress(done: int, total: int) -> None:
                    with tally.paused():
                        _update(request, progress_done=done, progress_total=total)
                        if run is not None:
                            job_progress(run, done=done, total=total)

                counts = erasure_steps(
                    user_id=request.user_id,
                    # The agents checked: for every agent, those there were at the gate (an agent made
                    # since is not erased); chosen ones as chosen (one deleted since is none).
                    agent_ids=request.agent_ids or gate.agent_ids,
                    mode=request.mode,
                    actor=actor,
                    progress=progress,
                    identifiers=request.identifiers or [],
                    # With the reasons: the mark keeps them, for a resume (governance.erasure.resume).
                    exclude=dict(request.excluded or {}),
                )
        touched = tally.tables()
        held = tally.held_before()
        copies = tally.copies()
        seconds["erasing"] = time.perf_counter() - began
        _update(request, phase="scanning", counts=counts)
        began = time.perf_counter()
        scan = leftovers_scan(
            probes=probes,
            agent_ids=request.agent_ids,
            redaction=request.mode == ErasureRequest.Mode.REDACT,
            erased_ids=erased_ids,
        )
        seconds["scanning"] = time.perf_counter() - began
        _update(request, phase="reporting")
        report = _report(
            request,
            counts=counts,
            tables=touched,
            held=held,
            copies=copies,
            probes=probes,
            scan=scan,
            holding=holding,
            seconds=seconds,
        )
        digest = report_sha256(report)
        receipt = _receipt(report, digest=digest)
        with transaction.atomic():
            # The other identifiers the officer typed (her e-mail, phone, name) go with the erasure
            # they served: a done request is never run again, and it names whom it was for by the
            # user id alone (KEPT_ON_PURPOSE). The report says how many there were.
            _update(
                request,
                status=Status.DONE,
                identifiers=[],
                phase="",
                report=report,
                report_sha256=digest,
                receipt=receipt,
                finished_at=timezone.now(),
                progress_done=request.progress_total or request.progress_done,
            )
            audit_append(
                action="erasure.done",
                actor=actor,
                subject=str(request.pk),
                outcome="clean" if scan["found"] == 0 else "leftovers",
                details={
                    "request": request.pk,
                    "counts": {k: v for k, v in counts.items() if v},
                    "found": scan["found"],
                    "report_sha256": digest,
                },
            )
            for agent_id in holding:
                event_record(agent_id=agent_id, type="erasure.done", ids=[str(request.pk)])
        return {"counts": counts, "found": scan["found"], "report_sha256": digest}
    except Exception as exc:
        with transaction.atomic():
            _update(
                request,
                status=Status.FAILED,
                phase="",
                error=f"{type(exc).__name__}: {exc}"[:2000],
                finished_at=timezone.now(),
            )
            audit_append(
                action="erasure.failed",
                actor=actor,
                subject=str(request.pk),
                outcome="failed",
                details={"request": request.pk, "error": type(exc).__name__},
            )
        raise


def _receipt(report: dict[str, Any], *, digest: str) -> dict[str, Any] | None:
    """The report signed with the service's key (governance.receipts), or None when the key cannot
    be had (misconfigured): the erasure is done either way, and its hash is in the audit chain."""
    try:
        return receipt_sign({"kind": REPORT_FORMAT, "report_sha256": digest, "report": report})
    except (ImproperlyConfigured, OSError, ValueError):
        logger.exception("the erasure report could not be signed; it is kept unsigned")
        return None


def backup_holdings(*, user_id: str, held: dict[tuple[str, str, str], int]) -> dict[str, list[dict[str, Any]]]:
    """What a copy made before the erasure still holds of the rows it deleted or redacted, measured
    (governance.erasure.tally: each row's columns of content read before the statement changed
    them, the data key each value was sealed under): per table and column, the rows whose value no
    key opens now (sealed under a destroyed key), and the rows still readable in such a copy, with
    why (plaintext, or sealed under a key that lives: the agent's, another person's, the person's
    own while it lives), and apart (`hashed`) the rows holding only an equality column's keyed hash
    (an item's subject, an entity's normalised name: no key opens it, and it tells whether a value
    guessed is it only to the holder of the agent's blind key)."""
    keys = {
        str(pk): (agent, owner, destroyed)
        for pk, agent, owner, destroyed in DataKey.objects.filter(
            pk__in={
                member for _t, _c, key in held if key and key not in (PSEUDONYMS, HASHES) for member in key_set_ids(key)
            }
        ).values_list("pk", "agent_id", "user_id", "destroyed_at")
    }
    unopenable: dict[tuple[str, str], int] = {}
    readable: dict[tuple[str, str, str], int] = {}
    hashed: dict[tuple[str, str], int] = {}
    for (table, column, key), rows in held.items():
        if key == HASHES:
            hashed[(table, column)] = hashed.get((table, column), 0) + rows
            continue
        if not key or key == PSEUDONYMS:
            if key:
                why = "keyed pseudonyms, linking to no one once the person's secret is deleted"
            else:
                why = _plain_ids_why(table, column) or "plaintext"
            readable[(table, column, why)] = readable.get((table, column, why), 0) + rows
            continue
        # A key set (several people's keys: a row naming them) opens only while every member lives.
        members = [keys.get(member, (None, None, None)) for member in key_set_ids(key)]
        owners = {owner for _a, owner, _d in members}
        if any(destroyed is not None for _a, _o, destroyed in members):
            unopenable[(table, column)] = unopenable.get((table, column), 0) + rows
            continue
        if None in owners:
            why = "sealed under a key the register does not know"
        elif user_id in owners:
            why = "sealed under the person's key, still live"
        elif owners == {""}:
            agent = members[0][0]
            why = "sealed under the agent's key" if agent is not None else "sealed under the key of no agent"
        else:
            why = "sealed under another person's key"
        readable[(table, column, why)] = readable.get((table, column, why), 0) + rows
    return {
        "unopenable": [{"table": t, "column": c, "rows": n} for (t, c), n in sorted(unopenable.items())],
        "readable": [{"table": t, "column": c, "rows": n, "why": w} for (t, c, w), n in sorted(readable.items())],
        "hashed": [{"table": t, "column": c, "rows": n} for (t, c), n in sorted(hashed.items())],
    }


# Columns that hold ids, never words, read in SQL and so never sealed: what a copy made before an
# erasure still reads of each row it deleted or changed (`backup_holdings` says which, measured).
_PLAIN_ID_COLUMNS = {
    "user_id": "person ids in plaintext: whose row it is",
    "sender": "person ids in plaintext: who sent the message",
    "words_of": "person ids in plaintext: whose words the row holds",
    KEY_PEOPLE: "person ids in plaintext: the people the row names",
}
_PLAIN_THREAD_IDS = "thread ids in plaintext: the client's, which may name the person"


def _plain_ids_why(table: str, column: str) -> str | None:
    """Why a plaintext column an old copy keeps is no words but ids (None: it holds words)."""
    if column in _PLAIN_ID_COLUMNS:
        return _PLAIN_ID_COLUMNS[column]
    if column == "thread_id" or (table, column) == (Thread._meta.db_table, "external_id"):
        return _PLAIN_THREAD_IDS
    return None


def _unsealed_kept(tables: dict[str, dict[str, int]], copies: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
    """What a copy made before the erasure keeps of the rows it deleted or redacted besides their
    content columns, which encryption never seals: per table, the vectors (counted as the
    statements deleted or cleared them), the copies of a vector outside the model (an entry's sign
    bits, counted the same way) and the rows with a blind index (keyed hashes of words)."""
    indexed = {
        model._meta.db_table: [str(f.column) for f in model._meta.concrete_fields if isinstance(f, BlindIndexField)]
        for model in apps.get_models()
        if not model._meta.proxy
    }
    kept: list[dict[str, Any]] = []
    for table, kinds in sorted(tables.items()):
        vectors = kinds.get("vectors_deleted", 0) + kinds.get("vectors_cleared", 0)
        if vectors:
            kept.append({"table": table, "column": "embedding", "rows": vectors, "what": "vectors"})
        kept.extend(
            {"table": table, "column": column, "rows": rows, "what": "the vectors' sign bits"}
            for (copied, column), rows in copies.items()
            if copied == table
        )
        rows = kinds.get("deleted", 0) + kinds.get("redacted", 0)
        if rows and keyring().enabled:
            kept.extend(
                {"table": table, "column": column, "rows": rows, "what": "blind-index hashes"}
                for column in indexed.get(table, [])
            )
    return kept


def _shredding(
    request: ErasureRequest,
    *,
    held: dict[tuple[str, str, str], int],
    tables: dict[str, dict[str, int]],
    copies: dict[tuple[str, str], int],
) -> dict[str, Any]:
    """What became of the person's data keys (encryption at rest, governance.crypto): the ids of
    those destroyed (so no copy of their sealed rows opens any more), and any still live; and what
    a copy made before the erasure still holds (`backup_holdings`, measured), which the statement
    says in words, never assumed."""
    keys = data_keys_of_person(user_id=request.user_id, agent_ids=request.agent_ids)

    def listed(key: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": key["id"],
            "agent": key["agent"],
            "destroyed_at": key["destroyed_at"].isoformat(timespec="seconds") if key["destroyed_at"] else None,
        }

    destroyed = [listed(k) for k in keys if k["destroyed_at"] is not None]
    live = [listed(k) for k in keys if k["destroyed_at"] is None]
    backup = backup_holdings(user_id=request.user_id, held=held)
    backup["unsealed"] = _unsealed_kept(tables, copies) + [
        {**r, "what": "keyed hashes of whole values (equality)"} for r in backup.pop("hashed")
    ]
    unsealed = "; ".join(f"{r['table']}.{r['column']}: {r['rows']} ({r['what']})" for r in backup["unsealed"])
    shut = sum(r["rows"] for r in backup["unopenable"])
    words = [r for r in backup["readable"] if not r["why"].startswith(("person ids", "thread ids"))]
    ids = [r for r in backup["readable"] if r not in words]
    still = sum(r["rows"] for r in words)
    where = "; ".join(f"{r['table']}.{r['column']}: {r['rows']} ({r['why']})" for r in backup["readable"])
    words_where = "; ".join(f"{r['table']}.{r['column']}: {r['rows']} ({r['why']})" for r in words)
    ids_where = "; ".join(f"{r['table']}.{r['column']}: {r['rows']}" for r in ids)
    if not keyring().enabled and not keys:
        statement = (
            "Encryption at rest is off: there was no data key to destroy. A copy made before the erasure "
            "(a backup, a dump, a replica) still holds, in the clear, every value the erasure deleted or "
            f"redacted{f' ({where})' if where else ''}, until it is rotated out."
        )
    elif request.mode == ErasureRequest.Mode.REDACT:
        statement = (
            "A redaction keeps the person's data keys: the rows it keeps are still sealed under them, and a copy "
            f"made before it holds what it redacted{f' ({where})' if where else ''}."
        )
    else:
        statement = (
            f"Of the values the erasure deleted or redacted, {shut} no longer open{'s' if shut == 1 else ''} in a "
            "copy made before it (a backup, a dump, a replica): sealed under the person's keys, now destroyed, "
            "alone or in a key set with the keys of the others the row names. "
            + (
                f"Such a copy still holds {still} readable: {words_where}. "
                if still
                else "Such a copy holds none of them readable. "
            )
            + (
                "It still reads, in plaintext, the person and thread ids of those rows (ids, not words: whose "
                f"row, who sent it, whose words, whom it names, which thread): {ids_where}. "
                if ids
                else ""
            )
            + (f"It also holds, never sealed: {unsealed}; " if unsealed else "It also holds ")
            + "each row's ids, sizes and times (docs/security.md, Encryption at rest)."
        )
        if live:
            statement += (
                " Some of the person's data keys are still live (written after the erasure began): erase again "
                "to destroy them."
            )
    return {
        "encryption": keyring().enabled,
        "data_keys_destroyed": destroyed,
        "data_keys_live": live,
        # Measured before the erasure changed them: per table and column, what an old copy keeps.
        "backup": backup,
        "statement": statement,
    }


def _report(
    request: ErasureRequest,
    *,
    counts: dict[str, int],
    tables: dict[str, dict[str, int]],
    held: dict[tuple[str, str, str], int],
    copies: dict[tuple[str, str], int],
    probes: Sequence[Probe],
    scan: dict[str, Any],
    holding: Sequence[int],
    seconds: dict[str, float],
) -> dict[str, Any]:
    """What the erasure did and what the scan found, with nothing of what was erased: counts, table
    names, row ids and probe names. The samples' text is not in it.

    `tables` is what the database said each table lost (governance.erasure.tally): the total counts
    rows deleted and rows redacted, nothing else; vectors, rows cleared for re-embedding, links
    updated and bookkeeping rows added are counted apart. `counts` are the steps' own (threads,
    items purged, ...), kept as the dry run shows them."""
    totals = tally_totals(tables)
    erased = totals["deleted"] + totals["redacted"]
    if erased == 0 and scan["found"] == 0:
        summary = "Nothing about this person was found: nothing was erased, and the scan found nothing."
    else:
        changed = sum(1 for kinds in tables.values() if kinds.get("deleted") or kinds.get("redacted"))
        vectors = totals["vectors_deleted"] + totals["vectors_cleared"]
        done = (
            f"{totals['deleted']} row{'' if totals['deleted'] == 1 else 's'} deleted and {totals['redacted']} "
            f"redacted in {changed} table{'' if changed == 1 else 's'}"
            + (f" ({totals['re_embedded']} more cleared to be embedded again)" if totals["re_embedded"] else "")
            + (f", {vectors} vector{'' if vectors == 1 else 's'} with them (counted apart)" if vectors else "")
        )
        found = scan["found"]
        kept = (
            f" ({scan['kept_total']} row{'' if scan['kept_total'] == 1 else 's'} kept on purpose still name the person:"
            " the requests and holds about them, the register of their keys, what a redaction keeps; listed, each"
            " with why)"
            if scan.get("kept_total")
            else ""
        )
        summary = (
            f"{done}; the scan after the erasure found nothing left{kept}."
            if found == 0
            else f"{done}; the scan after the erasure found {found} row{'' if found == 1 else 's'} or file"
            f"{'' if found == 1 else 's'} still matching the person (listed below)."
        )
    booked = int(scan.get("bookkeeping_found") or 0)
    if booked:
        summary += (
            f" {booked} bookkeeping row{' still names' if booked == 1 else 's still name'} the person (audit trail,"
            " events, access log, admin log: listed apart)."
        )
    return {
        "format": REPORT_FORMAT,
        "request": request.pk,
        "user_id": request.user_id,
        "mode": request.mode,
        "agents": list(request.agent_ids) or "all",
        "agents_holding": list(holding),
        # The groups of mentions the officer left out, each with its typed reason, as filed and
        # audited (`erasure.request`): what every run of it kept, a resumed one's too.
        "excluded": dict(request.excluded or {}),
        "requested_by": request.requested_by_name,
        "requested_at": request.created_at.isoformat(timespec="seconds"),
        "started_at": request.started_at.isoformat(timespec="seconds") if request.started_at else None,
        "scanned_at": timezone.now().isoformat(timespec="seconds"),
        "counts": counts,
        # Measured (governance.erasure.tally): per table, rows deleted, redacted, cleared to be
        # embedded again, otherwise updated, inserted (bookkeeping), and vectors deleted or cleared.
        "tables": tables,
        "totals": totals,
        # Rows deleted plus rows redacted: no vector, no bookkeeping row, no link updated.
        "erased_total": erased,
        "erased_total_counts": "rows deleted + rows redacted (vectors, re-embeddings, link updates, inserts apart)",
        # How long each step took (this run's; a retried request's report times its last run).
        "seconds": {step: round(value, 3) for step, value in seconds.items()},
        "nothing_to_erase": erased == 0,
        "probes": {
            "ids": [p.name for p in probes if p.whole_word],
            "samples": sum(1 for p in probes if not p.whole_word),
            "samples_taken": "before the erasure, kept in memory only",
        },
        "scan": scan,
        "crypto_shredding": _shredding(request, held=held, tables=tables, copies=copies),
        "outcome": "clean" if scan["found"] == 0 else "leftovers",
        "summary": summary,
    }
