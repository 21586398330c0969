"""Compaction as a service: a strategy plans, the service re-checks and writes one compaction entry.

Nothing is deleted: the compaction entry goes at the end of the active branch and names the
first kept entry; `compacted_history` reads the branch through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction

from governance.audit.chain import audit_append
from governance.crypto.keyring import encryption_enabled
from governance.jobs.broker import job_enqueue
from governance.jobs.runs import job_run, job_skip
from governance.models import JobRun
from memoryapp.compaction.history import compacted_history
from memoryapp.compaction.plan import STRATEGY_NAMES, SUMMARIZE, CompactionContext, CompactionPlan, strategy_options
from memoryapp.compaction.policy import thread_branch
from memoryapp.compaction.strategies import STRATEGIES
from memoryapp.errors import Conflict, DomainError, NotFound
from memoryapp.events.services import event_record
from memoryapp.llm.model import ModelUnavailable
from memoryapp.llm.port import model_available, recording_usage
from memoryapp.models import Entry, Thread
from memoryapp.models.choices import EntryType, Role
from memoryapp.subjects.detect import key_people_set
from memoryapp.threads.selectors import path_ids
from memoryapp.threads.services import entry_add

JOB_KIND = "compaction"
# The job that runs `compaction_job` (memoryapp.tasks.compaction), sent by name.
JOB_TASK = "memoryapp.tasks.compact_thread"


@dataclass
class CompactionOutcome:
    strategy: str
    entry: Entry | None = None
    plan: CompactionPlan | None = None
    reason: str = ""
    # What the zero-model tier left out: the run says it was partial.
    notes: list[str] = field(default_factory=list)

    def as_result(self) -> dict[str, Any]:
        result: dict[str, Any] = {"strategy": self.strategy, "compacted": self.entry is not None}
        if self.entry is not None:
            event = self.entry.event or {}
            result.update(
                compaction_entry_id=self.entry.id,
                first_kept_entry_id=event.get("first_kept_entry_id"),
                tokens_before=event.get("tokens_before"),
                tokens_after=event.get("tokens_after"),
                cleared=len(event.get("cleared") or {}),
                prompt_version=event.get("prompt_version", ""),
            )
        if self.reason:
            result["reason"] = self.reason
        if self.notes:
            result["partial"] = "; ".join(self.notes)
        return result


def _check_strategy(strategy: str, options: dict[str, Any]) -> None:
    if strategy not in STRATEGY_NAMES:
        raise DomainError("unknown_strategy", f"strategy must be one of {', '.join(STRATEGY_NAMES)}.", field="strategy")
    strategy_options(strategy, options)


def _newest_compaction_id(entries: list[Entry]) -> str | None:
    return next((e.id for e in reversed(entries) if e.type == EntryType.COMPACTION), None)


def _audit_refused(*, thread: Thread, strategy: str, code: str, actor: str) -> None:
    audit_append(
        action="thread.compact",
        actor=actor,
        agent_id=thread.agent_id,
        thread_id=thread.external_id,
        person=thread.user_id,
        outcome="refused",
        details={"strategy": strategy, "code": code},
    )


# How much earlier than its job run a compaction's clock may say it was written (the run is made
# by the process that asked, the entry by the worker's: another host, another clock).
CLOCK_SKEW = timedelta(hours=1)


def _written_by(*, thread: Thread, run: JobRun) -> Entry | None:
    """The compaction entry this job run wrote already, if any (its event names the run).

    With encryption on the event is sealed and the database cannot look inside it: the thread's
    compactions written since the run was made (one per run, so a few) are opened here instead.
    """
    compactions = Entry.objects.filter(thread=thread, type=EntryType.COMPACTION)
    if not encryption_enabled():
        return compactions.filter(event__job_run_id=run.pk).first()
    since = compactions.filter(created_at__gte=run.created_at - CLOCK_SKEW).order_by("-seq")
    return next((e for e in since if isinstance(e.event, dict) and e.event.get("job_run_id") == run.pk), None)


def compaction_run(
    *,
    thread: Thread,
    strategy: str,
    options: dict[str, Any] | None = None,
    run: JobRun | None = None,
    actor: str = "",
    source: str = "manual",
) -> CompactionOutcome:
    """Plan a compaction of the thread's active branch with `strategy` and write it.

    `source` is what asked for it (as 003's CompactionSource): `manual` (the API, the admin),
    `auto-trigger` (the thread passed its trigger after an append) or `pre-step` (before the
    agent's next model step, in its context request); the entry's event records it.

    1. A job run that already wrote its compaction (a redelivered job) returns that entry.
    2. Read the active branch and the history as the model sees it now.
    3. The strategy plans (model calls are recorded on `run`); None: nothing to compact.
    4. `compaction_write` re-checks what the plan stands on and writes the entry.
    """
    options = dict(options or {})
    _check_strategy(strategy, options)
    if run is not None:
        done = _written_by(thread=thread, run=run)
        if done is not None:
            return CompactionOutcome(strategy=strategy, entry=done, reason="already written by this job run")
    branch = thread_branch(thread)
    ctx = CompactionContext(
        thread=thread, branch=branch, view=compacted_history(branch), options=strategy_options(strategy, options)
    )
    try:
        with recording_usage(run):
            plan = STRATEGIES[strategy](ctx)
    except Conflict as refused:
        _audit_refused(thread=thread, strategy=strategy, code=refused.code, actor=actor)
        raise
    if plan is None:
        return CompactionOutcome(strategy=strategy, reason="nothing to compact", notes=ctx.notes)
    plan.details["source"] = source
    # Only what was there when the strategy read it counts: an entry redacted before the run
    # began does not block every later compaction.
    alive = {e.id for e in branch if e.redacted_at is None and e.type != EntryType.COMPACTION}
    try:
        entry = compaction_write(
            thread=thread,
            plan=plan,
            covered_ids=plan.covered_ids & alive,
            based_on=_newest_compaction_id(branch),
            run_id=run.pk if run is not None else None,
            actor=actor,
        )
    except Conflict as refused:
        _audit_refused(thread=thread, strategy=strategy, code=refused.code, actor=actor)
        raise
    return CompactionOutcome(strategy=strategy, entry=entry, plan=plan, notes=ctx.notes)


def _summary_words_of(*, entry: Entry, locked: Thread, covered_ids: set[str]) -> None:
    """A compaction holds the words of the people whose turns it stands in for (their messages in
    the thread, a fork's copies of theirs, with the assistant's replies to them) and names whom
    those turns named. One covering the turns of one person other than the thread's is sealed again
    under their key (`Entry.words_of`); one covering several people's turns, or turns naming
    others, under the key set of its owner and each of them (`Entry.key_people`), so the erasure of
    any of them shreds every old copy of it (docs/security.md "Whose key seals a row")."""
    covered = list(
        Entry.objects.filter(thread_id=locked.pk, id__in=covered_ids).only(
            "id", "role", "sender", "words_of", "key_people"
        )
    )
    # Whose turns: user messages, tool results and earlier summaries; the assistant's replies
    # answer them (they count only when the summary covers nothing else).
    turns = [e for e in covered if e.role != Role.ASSISTANT] or covered
    people = {e.words_person(thread_person=locked.user_id) for e in turns}
    named = {p for e in covered for p in (e.key_people or ())}
    before = (entry.words_of, entry.key_people)
    if len(people) == 1 and (person := next(iter(people))) != locked.user_id:
        entry.words_of = person
    owner = entry.words_person(thread_person=locked.user_id)
    key_people_set(entry, {*people, *named, *(entry.key_people or ())}, owner_person=owner)
    if (entry.words_of, entry.key_people) != before:
        entry.save(update_fields=["words_of", "key_people", "content", "text", "tool_calls", "event"])


@transaction.atomic
def compaction_write(
    *,
    thread: Thread,
    plan: CompactionPlan,
    covered_ids: set[str],
    based_on: str | None,
    run_id: int | None = None,
    actor: str = "",
) -> Entry:
    """Write the compaction entry at the end of the active branch, if what it covers still stands.

    1. Lock the thread row (entry writes, deletes and redactions of the thread wait for us).
    2. Refuse (409) when an entry the plan covers was deleted, redacted, or left the active
       branch while the strategy ran, or another compaction was written meanwhile.
    3. Add the entry (type `compaction`, role `user`, content = summary or note, event = plan)
       and its audit record, in this transaction.
    """

    locked = Thread.objects.select_for_update().filter(pk=thread.pk).first()
    if locked is None:
        raise NotFound("Thread")
    on_branch = path_ids(thread=locked)
    gone = covered_ids - on_branch
    redacted = Entry.objects.filter(id__in=covered_ids, redacted_at__isnull=False).exists()
    if gone or redacted:
        raise Conflict(
            "compaction_stale",
            "Entries this compaction covers were deleted, redacted or left the branch while it ran; nothing was written.",
        )
    newest = (
        Entry.objects.filter(thread=locked, id__in=on_branch, type=EntryType.COMPACTION)
        .order_by("-seq")
        .values_list("id", flat=True)
        .first()
    )
    if newest != based_on:
        raise Conflict(
            "compaction_superseded", "Another compaction was written while this one ran; nothing was written."
        )
    event = plan.event()
    if run_id is not None:
        event["job_run_id"] = run_id
    entry = entry_add(thread=thread, type=EntryType.COMPACTION, role="user", content=plan.content, event=event)
    _summary_words_of(entry=entry, locked=locked, covered_ids=covered_ids)
    event_record(agent_id=locked.agent_id, type="compaction.created", thread_id=locked.external_id, ids=[entry.id])
    audit_append(
        action="thread.compact",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        person=locked.user_id,
        subject=entry.id,
        outcome="written",
        details={
            "strategy": plan.strategy,
            "first_kept_entry_id": plan.first_kept_entry_id,
            "cleared": len(plan.cleared),
            "tokens_before": plan.tokens_before,
            "tokens_after": plan.tokens_after,
        },
    )
    return entry


# --- jobs ------------------------------------------------------------------------------------------


def _job_arguments(thread: Thread, strategy: str, options: dict[str, Any], actor: str) -> dict[str, Any]:
    return {
        "thread_pk": thread.pk,
        "strategy": strategy,
        "options": options,
        "actor": actor,
    }


def compaction_job(run: JobRun, outcomes: list[CompactionOutcome] | None = None) -> dict[str, Any] | None:
    """The body of a compaction job run: skipped with its reason when it cannot run."""
    arguments = run.arguments or {}
    thread = Thread.objects.filter(pk=int(arguments.get("thread_pk") or 0)).first()
    if thread is None:
        job_skip(run, "the thread was deleted")
        return None
    strategy = str(arguments.get("strategy"))
    if strategy == SUMMARIZE and not model_available():
        job_skip(run, f"no language model is configured (LLM_PROVIDER=none): {strategy} needs one")
        return None
    try:
        outcome = compaction_run(
            thread=thread,
            strategy=strategy,
            options=arguments.get("options") or {},
            run=run,
            actor=str(arguments.get("actor") or ""),
        )
    except ModelUnavailable as exc:
        job_skip(run, f"no language model is configured: {exc}")
        return None
    if outcomes is not None:
        outcomes.append(outcome)
    return outcome.as_result()


def compaction_request(
    *, thread: Thread, strategy: str, options: dict[str, Any] | None = None, actor: str = ""
) -> JobRun:
    """Enqueue a compaction job (admin "compact now", API with async); one queued run per thread and strategy."""
    options = dict(options or {})
    _check_strategy(strategy, options)
    return job_enqueue(
        kind=JOB_KIND,
        task_name=JOB_TASK,
        arguments=_job_arguments(thread, strategy, options, actor),
        agent_id=thread.agent_id,
        dedupe_key=f"compact:{thread.pk}:{strategy}",
    )


def compaction_now(
    *, thread: Thread, strategy: str, options: dict[str, Any] | None = None, actor: str = ""
) -> tuple[JobRun, CompactionOutcome | None]:
    """Run a compaction in this process (the zero-model tier in a request), still as a job run.

    Errors (a refused compaction) mark the run failed and are raised to the caller.
    """
    options = dict(options or {})
    _check_strategy(strategy, options)
    run = JobRun.objects.create(
        kind=JOB_KIND, agent_id=thread.agent_id, arguments=_job_arguments(thread, strategy, options, actor)
    )
    outcomes: list[CompactionOutcome] = []
    job_run(run.pk, lambda r: compaction_job(r, outcomes))
    run.refresh_from_db()
    return run, (outcomes[0] if outcomes else None)
