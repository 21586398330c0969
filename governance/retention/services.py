"""Retention: the prune that applies every policy, with a dry run (002 RetentionOptions, Storage.prune).

One pass over the agents (in id order; or one agent), each under its policy (`policy_for`: the
agent's own, else the default), applying its rules in this order:

1. `suggested`: suggested items not reviewed within `suggested_review_days` of being recorded expire
   (deleted with their evidence and review steps);
2. `inactive`: superseded, stale and rejected items recorded more than `inactive_item_days` ago are
   removed with their evidence (and taken out of the playbooks and observations naming them);
3. `facts`: facts whose time to live ran out (as the facts prune always did);
4. `tool_results`: tool results a compaction cleared behind a handle, older than `tool_result_days`,
   lose their content (redacted in place);
5. `threads`: threads whose last write (the thread's update or its newest entry) is `thread_ttl_days`
   old are deleted through the delete-thread cascade;
6. `trim`: `keep_checkpoints` and `drop_branches` (governance.retention.pruning.thread_trim);
7. `job_runs`: finished job runs older than `job_run_days` (runs of no agent: the default policy's);
8. `events`: change events and webhook delivery attempts older than `event_days`.

Items go first, so what the later cascades take with a thread or a branch is never counted as
an item rule's, and the dry run (which changes nothing) counts what the real run then does.

Nothing a legal hold in force covers is changed (governance.retention.held): its threads and
items are skipped, threads counted in `threads_held`. A thread with a job run in progress (a
compaction, an extraction) or held by an agent's run (002 runs: running, its lease not out) is
busy: skipped and counted once in `threads_busy` (002), and a later prune takes it. Audit
records are never pruned; change events and job runs carry ids only and are not held.

Every batch is its own transaction (at most PRUNE_BATCH rows, or threads): it locks the threads it
changes until it commits, and records in the job run where the prune stands and what it counted so
far. A worker killed between batches loses nothing: the run is claimed again and goes on from there,
with the same cut-off times (the run's `as_of`), to the same end state and the same counts. The real
run ends with one audit record of the counts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, DateTimeField, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from governance.audit.chain import audit_append
from governance.audit.pseudonyms import pseudonym_names
from governance.crypto.fields import update_values_sealed
from governance.jobs.broker import job_enqueue
from governance.jobs.schedules import schedule_next_run
from governance.models import JobRun
from governance.retention.held import held_items, held_threads, holds_in_force
from governance.retention.policies import policy_for, retention_policies
from governance.retention.pruning import externalised_results, thread_trim, thread_trim_plan, tool_results_expire
from memoryapp.consolidation.lineage import derived_files_forget
from memoryapp.events.services import events_prune
from memoryapp.forgetting.services import threads_delete
from memoryapp.items.rules import Scope, normalized_name
from memoryapp.items.services import slot_lock
from memoryapp.models import Agent, Entry, Event, MemoryItem, RetentionPolicy, Thread, WebhookDelivery
from memoryapp.models.choices import EntryType, ItemStatus
from memoryapp.retry import atomic_retrying
from memoryapp.threads.runs import threads_running

logger = logging.getLogger(__name__)

PRUNE_JOB_KIND = "retention_prune"
PRUNE_TASK = "governance.tasks.retention_prune_job"
PRUNE_TICK = "governance.tasks.retention_prune_tick"
ACTOR = "retention"
# Thread ids a report lists (the first ones deleted, or to delete).
REPORT_THREAD_IDS = 100
RULES = ("suggested", "inactive", "facts", "tool_results", "threads", "trim", "job_runs", "events")
COUNT_KEYS = (
    "threads_deleted",
    "threads_busy",
    "threads_held",
    "thread_entries_deleted",
    "checkpoints_deleted",
    "history_entries_deleted",
    "branches_deleted",
    "branch_entries_deleted",
    "memory_items_deleted",
    "suggested_items_expired",
    "inactive_items_deleted",
    "facts_expired",
    "tool_results_expired",
    "job_runs_deleted",
    "events_deleted",
    "webhook_deliveries_deleted",
)
# What the run's progress counts: rows (a thread as one) changed, each once.
PROGRESS_KEYS = tuple(
    k for k in COUNT_KEYS if k not in ("threads_busy", "threads_held", "thread_entries_deleted", "memory_items_deleted")
)
_FINISHED = (JobRun.Status.SUCCEEDED, JobRun.Status.FAILED, JobRun.Status.SKIPPED)


@dataclass
class PruneState:
    """Where a prune stands and what it counted: saved in its job run after every batch."""

    as_of: str
    agent_slug: str = ""
    dry_run: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0))
    thread_ids: list[str] = field(default_factory=list)
    # Position: the agent being pruned (pk; 0 = the rows of no agent, last), the rule, the last key.
    agent_pk: int | None = None
    rule: int = 0
    after: Any = None
    # Threads of the current agent skipped once already (counted once however many rules meet them).
    skipped: list[int] = field(default_factory=list)
    # Dry run: threads of the current agent the thread rule would delete (the trim leaves them).
    doomed: list[int] = field(default_factory=list)
    done: bool = False

    def add(self, **counts: int) -> None:
        for key, value in counts.items():
            self.counts[key] = self.counts.get(key, 0) + value

    def report(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "as_of": self.as_of,
            "agent": self.agent_slug or None,
            "counts": dict(self.counts),
            "thread_ids": list(self.thread_ids),
            "done": self.done,
        }

    def saved(self) -> dict[str, Any]:
        return {**self.report(), "position": [self.agent_pk, self.rule, self.after, self.skipped]}

    @classmethod
    def resumed(cls, saved: dict[str, Any]) -> PruneState:
        state = cls(as_of=saved["as_of"], agent_slug=saved.get("agent") or "", dry_run=bool(saved.get("dry_run")))
        state.counts.update(saved.get("counts") or {})
        state.thread_ids = list(saved.get("thread_ids") or [])
        state.agent_pk, state.rule, state.after, state.skipped = saved["position"]
        state.done = bool(saved.get("done"))
        return state


# --- the candidates of each rule ------------------------------------------------------------------


def _cutoff(as_of: datetime, days: int | None) -> datetime | None:
    return None if days is None else as_of - timedelta(days=days)


def _suggested(agent: Agent, policy: RetentionPolicy, as_of: datetime) -> QuerySet[MemoryItem] | None:
    cutoff = _cutoff(as_of, policy.suggested_review_days)
    if cutoff is None:
        return None
    return MemoryItem.objects.filter(agent=agent, status=ItemStatus.SUGGESTED, recorded_at__lt=cutoff)


def _inactive(agent: Agent, policy: RetentionPolicy, as_of: datetime) -> QuerySet[MemoryItem] | None:
    cutoff = _cutoff(as_of, policy.inactive_item_days)
    if cutoff is None:
        return None
    statuses = (ItemStatus.SUPERSEDED, ItemStatus.STALE, ItemStatus.REJECTED)
    return MemoryItem.objects.filter(agent=agent, status__in=statuses, recorded_at__lt=cutoff)


def _facts(agent: Agent, policy: RetentionPolicy | None, as_of: datetime) -> QuerySet[MemoryItem]:
    return MemoryItem.objects.filter(agent=agent, expires_at__isnull=False, expires_at__lte=as_of)


def _tool_results(agent: Agent, policy: RetentionPolicy, as_of: datetime) -> QuerySet[Entry] | None:
    cutoff = _cutoff(as_of, policy.tool_result_days)
    if cutoff is None:
        return None
    old = Entry.objects.filter(agent=agent, created_at__lt=cutoff, redacted_at__isnull=True).exclude(
        thread__in=Thread.objects.filter(held_threads(agent_id=agent.pk))
    )
    threads = old.filter(type=EntryType.TOOL_RESULT).values("thread_id")
    return old.filter(externalised_results(agent_id=agent.pk, threads=threads))


def _expired_threads(agent: Agent, cutoff: datetime) -> QuerySet[Thread]:
    """Threads whose last write is before `cutoff`: the thread's own update, or its newest entry
    (entries do not move `updated_at`; the newest is the highest seq, read off the thread's seq index)."""
    newest = Entry.objects.filter(thread=OuterRef("pk")).order_by("-seq").values("created_at")[:1]
    return (
        Thread.objects.filter(agent=agent, updated_at__lt=cutoff)
        .annotate(
            last_write=Greatest(
                F("updated_at"), Coalesce(Subquery(newest, output_field=DateTimeField()), F("updated_at"))
            )
        )
        .filter(last_write__lt=cutoff)
    )


def _trim_candidates(agent: Agent, policy: RetentionPolicy) -> QuerySet[Thread] | None:
    """Threads that may have something to trim: branched ones, or with more compactions than kept."""
    if not policy.keep_checkpoints and not policy.drop_branches:
        return None
    branched = Q(branch_epoch__gt=0)
    if not policy.keep_checkpoints:
        return Thread.objects.filter(agent=agent).filter(branched)
    # The compaction just past the kept ones, if there is one (read off the compaction index).
    beyond_kept = (
        Entry.objects.filter(thread=OuterRef("pk"), type=EntryType.COMPACTION)
        .order_by("-seq")
        .values("seq")[policy.keep_checkpoints : policy.keep_checkpoints + 1]
    )
    return (
        Thread.objects.filter(agent=agent)
        .annotate(beyond_kept=Subquery(beyond_kept))
        .filter(branched | Q(beyond_kept__isnull=False))
    )


def _busy_threads(pks: list[int], *, exclude_run: int | None) -> set[int]:
    """Threads with work in progress on them (002 busy): a job run (a compaction, an extraction...)
    or an agent's run that holds the thread (`threads_running`: running, its lease not out)."""
    if not pks:
        return set()
    running = JobRun.objects.filter(status=JobRun.Status.RUNNING, arguments__thread_pk__in=pks)
    if exclude_run is not None:
        running = running.exclude(pk=exclude_run)
    jobs = {int(v) for v in running.values_list("arguments__thread_pk", flat=True) if v is not None}
    return jobs | threads_running(thread_pks=pks)


# --- the prune ------------------------------------------------------------------------------------


@dataclass
class _Pass:
    state: PruneState
    as_of: datetime
    batch: int
    run: JobRun | None
    policies: dict[int | None, RetentionPolicy]
    on_batch: Callable[[PruneState], None] | None = None
    # Per rule, the agents that may have something for it (`_agents_maybe`), found once per pass.
    maybe: dict[str, set[int] | None] = field(default_factory=dict)

    @property
    def dry(self) -> bool:
        return self.state.dry_run

    def may_have(self, rule: str, agent: Agent) -> bool:
        if rule not in self.maybe:
            self.maybe[rule] = _agents_maybe(rule, self.as_of, self.policies)
        found = self.maybe[rule]
        return found is None or agent.pk in found

    def checkpoint(self) -> None:
        """Save where the prune stands in its run: inside the batch's transaction, so the work and
        the position commit together."""
        if self.run is not None and not self.dry:
            done = sum(self.state.counts.get(k, 0) for k in PROGRESS_KEYS)
            saved = update_values_sealed(self.run, {"result": self.state.saved(), "progress_done": done})
            JobRun.objects.filter(pk=self.run.pk).update(**saved)
            self.run.progress_done = done


def prune_agents(state: PruneState) -> list[Agent | None]:
    """The agents a prune goes through, in pk order; None last (the job runs of no agent)."""
    if state.agent_slug:
        return list(Agent.objects.filter(slug=state.agent_slug))
    return [*Agent.objects.order_by("pk"), None]


def retention_prune(
    *,
    as_of: datetime | None = None,
    agent: Agent | None = None,
    dry_run: bool = False,
    run: JobRun | None = None,
    batch: int | None = None,
    on_batch: Callable[[PruneState], None] | None = None,
) -> PruneState:
    """Apply every policy once (see the module's docstring); the dry run only counts.

    With a `run` whose result holds a saved position (a run claimed again after its worker was
    killed), the prune goes on from there with the run's `as_of`. `on_batch` is called after each
    committed batch (the bench's and tests' probe).
    """
    saved = (run.result or {}) if run is not None else {}
    if "position" in saved and not dry_run:
        state = PruneState.resumed(saved)
        if state.done:
            return state  # killed after its last commit (counts and audit record in): nothing left
    else:
        moment = as_of or timezone.now()
        state = PruneState(as_of=moment.isoformat(), agent_slug=agent.slug if agent else "", dry_run=dry_run)
    work = _Pass(
        state=state,
        as_of=datetime.fromisoformat(state.as_of),
        batch=batch or settings.PRUNE_BATCH,
        run=run,
        policies=retention_policies(),
        on_batch=on_batch,
    )
    agents = prune_agents(state)
    keys = [each.pk if each is not None else 0 for each in agents]
    if state.agent_pk is not None:
        # Resumed: the agents before the saved one are done (None, the rows of no agent, is last).
        order = [k if k else float("inf") for k in keys]
        saved = state.agent_pk if state.agent_pk else float("inf")
        agents = [a for a, k in zip(agents, order, strict=True) if k >= saved]
    for each in agents:
        pk = each.pk if each is not None else 0
        if state.agent_pk != pk:
            state.agent_pk, state.rule, state.after, state.skipped, state.doomed = pk, 0, None, [], []
        _prune_agent(work, each)
    state.done = True
    if not dry_run:
        _finish(work)
    return state


@transaction.atomic
def _finish(work: _Pass) -> None:
    state = work.state
    audit_append(
        action="retention.prune",
        actor=ACTOR,
        subject=state.agent_slug or "all agents",
        outcome="pruned",
        details={
            "as_of": state.as_of,
            "run_id": work.run.pk if work.run else None,
            **state.counts,
            "thread_ids": state.thread_ids[:50],
        },
    )
    work.checkpoint()


def _prune_agent(work: _Pass, agent: Agent | None) -> None:
    state = work.state
    if agent is None:
        # Job runs of no agent follow the default policy; nothing else is without an agent.
        state.rule = max(state.rule, RULES.index("job_runs"))
        while state.rule == RULES.index("job_runs"):
            if not _job_runs_batch(work, None, work.policies.get(None)):
                state.rule += 1
        return
    policy = policy_for(agent, policies=work.policies)
    while state.rule < len(RULES):
        name = RULES[state.rule]
        more = work.may_have(name, agent) and _RULE_BATCHES[name](work, agent, policy)
        if not more:
            state.rule += 1
            state.after = None
        elif not work.dry and settings.PRUNE_PAUSE_SECONDS:
            # Room for the writers between batches (and for an operator to watch it go).
            time.sleep(settings.PRUNE_PAUSE_SECONDS)


def _agents_maybe(rule: str, as_of: datetime, policies: dict[int | None, RetentionPolicy]) -> set[int] | None:
    """The agents that may have rows for `rule` under the most eager policy (a superset; one query):
    the others skip the rule without a query of their own. None: every agent is looked at."""

    def loosest(days: str) -> datetime | None:
        given = [getattr(p, days) for p in policies.values() if getattr(p, days) is not None]
        return as_of - timedelta(days=min(given)) if given else None

    rows: QuerySet[Any] | None
    if rule == "facts":
        rows = MemoryItem.objects.filter(expires_at__isnull=False, expires_at__lte=as_of)
    elif rule == "threads":
        cutoff = loosest("thread_ttl_days")
        rows = Thread.objects.filter(updated_at__lt=cutoff) if cutoff else None
    elif rule in ("suggested", "inactive"):
        cutoff = loosest("suggested_review_days" if rule == "suggested" else "inactive_item_days")
        statuses = (
            [ItemStatus.SUGGESTED]
            if rule == "suggested"
            else [ItemStatus.SUPERSEDED, ItemStatus.STALE, ItemStatus.REJECTED]
        )
        rows = MemoryItem.objects.filter(status__in=statuses, recorded_at__lt=cutoff) if cutoff else None
    else:
        return None
    if rows is None:
        return set()  # no policy sets the rule
    return set(rows.order_by().values_list("agent_id", flat=True).distinct())


# Each rule's batch: True while there is more to do. The real run's batches are transactions.


def _items_batch(work: _Pass, agent: Agent, rows: QuerySet[MemoryItem] | None, key: str) -> bool:
    if rows is None:
        return False
    rows = rows.exclude(held_items(agent_id=agent.pk))
    if work.dry:
        found = rows.count()
        work.state.add(**{key: found, "memory_items_deleted": found})
        return False
    return _items_delete(work, agent, rows, key)


@atomic_retrying
def _items_delete(work: _Pass, agent: Agent, rows: QuerySet[MemoryItem], key: str) -> bool:
    doomed = list(
        rows.order_by("pk").only("pk", "user_id", "project_id", "thread_id", "subject", "attribute")[: work.batch]
    )
    if not doomed:
        return False
    # Writers of these slots wait (a repeat must not merge into an item going now); one order.
    for slot in sorted(
        {(i.user_id, i.project_id, i.thread_id, normalized_name(i.subject), i.attribute) for i in doomed}
    ):
        slot_lock(agent_id=agent.pk, scope=Scope(slot[0], slot[1], slot[2]), subject_key=slot[3], attribute=slot[4])
    ids = [i.pk for i in doomed]
    gone = rows.filter(pk__in=ids)
    still = list(gone.values_list("pk", flat=True))
    _, by_model = gone.delete()
    deleted = by_model.get(MemoryItem._meta.label, 0)
    if still:
        derived_files_forget(agent=agent, item_ids=still)
    work.state.add(**{key: deleted, "memory_items_deleted": deleted})
    work.checkpoint()
    transaction.on_commit(lambda: work.on_batch(work.state) if work.on_batch else None)
    return True


def _suggested_batch(work: _Pass, agent: Agent, policy: RetentionPolicy | None) -> bool:
    rows = _suggested(agent, policy, work.as_of) if policy else None
    return _items_batch(work, agent, rows, "suggested_items_expired")


def _inactive_batch(work: _Pass, agent: Agent, policy: RetentionPolicy | None) -> bool:
    rows = _inactive(agent, policy, work.as_of) if policy else None
    return _items_batch(work, agent, rows, "inactive_items_deleted")


def _facts_batch(work: _Pass, agent: Agent, policy: RetentionPolicy | None) -> bool:
    return _items_batch(work, agent, _facts(agent, policy, work.as_of), "facts_expired")


def _tool_results_batch(work: _Pass, agent: Agent, policy: RetentionPolicy | None) -> bool:
    rows = _tool_results(agent, policy, work.as_of) if policy else None
    if rows is None:
        return False
    if work.dry:
        work.state.add(tool_results_expired=rows.count())
        return False
    return _tool_results_expire(work, rows)


@atomic_retrying
def _tool_results_expire(work: _Pass, rows: QuerySet[Entry]) -> bool:
    entries = list(rows.order_by("pk").only("pk", "thread_id")[: work.batch])
    if not entries:
        return False
    work.state.add(tool_results_expired=tool_results_expire(entries=entries, actor=ACTOR))
    work.checkpoint()
    transaction.on_commit(lambda: work.on_batch(work.state) if work.on_batch else None)
    return True


def _skip(work: _Pass, thread_pk: int, key: str) -> None:
    if thread_pk not in work.state.skipped:
        work.state.skipped.append(thread_pk)
        work.state.add(**{key: 1})


def _threads_batch(work: _Pass, agent: Agent, policy: RetentionPolicy | None) -> bool:
    cutoff = _cutoff(work.as_of, policy.thread_ttl_days if policy else None)
    if cutoff is None:
        return False
    return _threads_step(work, agent, cutoff)


@atomic_retrying
def _threads_step(work: _Pass, agent: Agent, cutoff: datetime) -> bool:
    """One batch of expired threads, in pk order after the saved position: held and busy ones
    skipped and counted, the others deleted (locked from here to the batch's commit)."""
    state = work.state
    candidates = _expired_threads(agent, cutoff).order_by("pk")
    if state.after is not None:
        candidates = candidates.filter(pk__gt=state.after)
    if work.dry:
        threads = list(candidates.only("pk", "external_id")[: work.batch])
    else:
        # Locked and read again under the lock: a write since the query keeps the thread.
        pks = list(candidates.values_list("pk", flat=True)[: work.batch])
        threads = list(
            _expired_threads(agent, cutoff).filter(pk__in=pks).select_for_update(of=("self",)).order_by("pk")
        )
        if not threads and pks:
            state.after = pks[-1]
            return True
    if not threads:
        return False
    held = set(
        Thread.objects.filter(pk__in=[t.pk for t in threads])
        .filter(held_threads(agent_id=agent.pk))
        .values_list("pk", flat=True)
    )
    busy = _busy_threads([t.pk for t in threads], exclude_run=work.run.pk if work.run else None)
    doomed: list[Thread] = []
    for thread in threads:
        if thread.pk in held:
            _skip(work, thread.pk, "threads_held")
        elif thread.pk in busy:
            _skip(work, thread.pk, "threads_busy")
        else:
            doomed.append(thread)
    entries = dict(
        Entry.objects.filter(thread_id__in=[t.pk for t in doomed])
        .order_by()
        .values("thread_id")
        .annotate(n=Count("pk"))
        .values_list("thread_id", "n")
    )
    if work.dry:
        state.doomed.extend(t.pk for t in doomed)
    elif doomed:
        # One cascade for the batch: a statement per table for the threads nothing else stands on.
        threads_delete(threads=doomed, actor=ACTOR)
    for thread in doomed:
        state.add(threads_deleted=1, thread_entries_deleted=entries.get(thread.pk, 0))
        if len(state.thread_ids) < REPORT_THREAD_IDS:
            state.thread_ids.append(_thread_named(thread, dry=work.dry))
    state.after = threads[-1].pk
    work.checkpoint()
    if not work.dry:
        transaction.on_commit(lambda: work.on_batch(state) if work.on_batch else None)
    return True


def _thread_named(thread: Thread, *, dry: bool) -> str:
    """How the prune's report and its audit record name a thread: a dry run by its id (staff check
    what would go), a pruned one by its owner's pseudonym (governance.audit.pseudonyms), as every
    audit record names a thread: the id the client chose may name the person, and it is gone."""
    if dry or not thread.user_id:
        return thread.external_id
    return pseudonym_names(agent_id=thread.agent_id, user_id=thread.user_id, also=[thread.external_id])[
        thread.external_id
    ]


def _trim_batch(work: _Pass, agent: Agent, policy: RetentionPolicy | None) -> bool:
    if policy is None:
        return False
    candidates = _trim_candidates(agent, policy)
    if candidates is None:
        return False
    return _trim_step(work, agent, policy, candidates)


@atomic_retrying
def _trim_step(work: _Pass, agent: Agent, policy: RetentionPolicy, candidates: QuerySet[Thread]) -> bool:
    state = work.state
    candidates = candidates.order_by("pk")
    if state.after is not None:
        candidates = candidates.filter(pk__gt=state.after)
    # Trimming a thread reads its whole tree: a batch is fewer threads than rows.
    threads = list(
        candidates.only("pk", "external_id", "agent_id", "active_leaf_id", "branch_epoch")[: max(1, work.batch // 10)]
    )
    if not threads:
        return False
    pks = [t.pk for t in threads]
    held = set(Thread.objects.filter(pk__in=pks).filter(held_threads(agent_id=agent.pk)).values_list("pk", flat=True))
    busy = _busy_threads(pks, exclude_run=work.run.pk if work.run else None)
    keep, drop = policy.keep_checkpoints, policy.drop_branches
    for thread in threads:
        if thread.pk in state.doomed:
            continue
        trim = thread_trim_plan(thread=thread, keep_checkpoints=keep, drop_branches=drop)
        if trim.empty:
            continue
        if thread.pk in held:
            _skip(work, thread.pk, "threads_held")
            continue
        if thread.pk in busy:
            _skip(work, thread.pk, "threads_busy")
            continue
        if not work.dry:
            trim = thread_trim(thread=thread, keep_checkpoints=keep, drop_branches=drop, actor=ACTOR)
        state.add(**trim.counts())
    state.after = threads[-1].pk
    work.checkpoint()
    if not work.dry:
        transaction.on_commit(lambda: work.on_batch(state) if work.on_batch else None)
    return True


def _job_runs(agent: Agent | None, policy: RetentionPolicy | None, as_of: datetime) -> QuerySet[JobRun] | None:
    cutoff = _cutoff(as_of, policy.job_run_days if policy else None)
    if cutoff is None:
        return None
    runs = JobRun.objects.filter(status__in=_FINISHED, finished_at__lt=cutoff)
    return runs.filter(agent_id=agent.pk) if agent is not None else runs.filter(agent_id__isnull=True)


def _job_runs_batch(work: _Pass, agent: Agent | None, policy: RetentionPolicy | None) -> bool:
    runs = _job_runs(agent, policy, work.as_of)
    if runs is None:
        return False
    if work.run is not None:
        runs = runs.exclude(pk=work.run.pk)
    if work.dry:
        work.state.add(job_runs_deleted=runs.count())
        return False
    return _job_runs_delete(work, runs)


@atomic_retrying
def _job_runs_delete(work: _Pass, runs: QuerySet[JobRun]) -> bool:
    pks = list(runs.order_by("pk").values_list("pk", flat=True)[: work.batch])
    if not pks:
        return False
    deleted, _ = JobRun.objects.filter(pk__in=pks).delete()
    work.state.add(job_runs_deleted=deleted)
    work.checkpoint()
    transaction.on_commit(lambda: work.on_batch(work.state) if work.on_batch else None)
    return True


def _events_batch(work: _Pass, agent: Agent, policy: RetentionPolicy | None) -> bool:
    cutoff = _cutoff(work.as_of, policy.event_days if policy else None)
    if cutoff is None:
        return False
    if work.dry:
        # The same rows events_prune takes: the agent's events, and its webhooks' delivery attempts.
        work.state.add(**_events_count(agent, cutoff))
        return False
    return _events_delete(work, agent, cutoff)


def _events_count(agent: Agent, cutoff: datetime) -> dict[str, int]:
    return {
        "events_deleted": Event.objects.filter(agent=agent, at__lt=cutoff).count(),
        "webhook_deliveries_deleted": WebhookDelivery.objects.filter(webhook__agent=agent, at__lt=cutoff).count(),
    }


@atomic_retrying
def _events_delete(work: _Pass, agent: Agent, cutoff: datetime) -> bool:
    gone = events_prune(older_than=cutoff, agent_id=agent.pk, limit=work.batch)
    if not any(gone.values()):
        return False
    work.state.add(events_deleted=gone["events"], webhook_deliveries_deleted=gone["webhook_deliveries"])
    work.checkpoint()
    transaction.on_commit(lambda: work.on_batch(work.state) if work.on_batch else None)
    return True


def _job_runs_agent_batch(work: _Pass, agent: Agent, policy: RetentionPolicy | None) -> bool:
    return _job_runs_batch(work, agent, policy)


_RULE_BATCHES: dict[str, Callable[[_Pass, Agent, RetentionPolicy | None], bool]] = {
    "suggested": _suggested_batch,
    "inactive": _inactive_batch,
    "facts": _facts_batch,
    "tool_results": _tool_results_batch,
    "threads": _threads_batch,
    "trim": _trim_batch,
    "job_runs": _job_runs_agent_batch,
    "events": _events_batch,
}


# --- asking for a prune ---------------------------------------------------------------------------


def retention_prune_request(*, agent: Agent | None = None, actor: str = "", as_of: datetime | None = None) -> JobRun:
    """Enqueue a real prune (beat, the admin, the command); its cut-offs are fixed now, in the run's
    arguments, so a run claimed again after its worker died ends where the first attempt would have."""
    moment = as_of or timezone.now()
    arguments = {"as_of": moment.isoformat(), "agent": agent.slug if agent else "", "actor": actor}
    return job_enqueue(
        kind=PRUNE_JOB_KIND,
        task_name=PRUNE_TASK,
        arguments=arguments,
        agent_id=agent.pk if agent else None,
        dedupe_key=f"{PRUNE_JOB_KIND}:{agent.slug if agent else '*'}",
    )


def retention_prune_job(run: JobRun) -> dict[str, Any]:
    """The body of the prune job: the run's arguments name the agent and the cut-off time."""
    arguments = run.arguments or {}
    as_of = datetime.fromisoformat(arguments["as_of"]) if arguments.get("as_of") else timezone.now()
    agent = Agent.objects.filter(slug=arguments["agent"]).first() if arguments.get("agent") else None
    if arguments.get("agent") and agent is None:
        return {"error": "no such agent", "counts": dict.fromkeys(COUNT_KEYS, 0), "thread_ids": []}
    state = retention_prune(as_of=as_of, agent=agent, run=run)
    return state.report()


# --- the state the overview shows ----------------------------------------------------------------


@dataclass
class RetentionState:
    """What the admin index says about retention: the last prune, holds in force, the next run."""

    last_run: JobRun | None
    last_counts: dict[str, int]
    running: JobRun | None
    holds_in_force: int
    policies: int
    default_policy: bool
    next_run_at: datetime | None
    schedule_enabled: bool


def retention_state() -> RetentionState:
    """A few small queries: the newest prune runs, a count of holds, the beat row of the prune."""
    runs = JobRun.objects.filter(kind=PRUNE_JOB_KIND).order_by("-created_at")
    last = runs.filter(status__in=_FINISHED).only("pk", "status", "result", "error", "finished_at").first()
    running = runs.filter(status__in=[JobRun.Status.RUNNING, JobRun.Status.QUEUED]).first()
    next_at, enabled = schedule_next_run(PRUNE_TICK)
    counts = (last.result or {}).get("counts") or {} if last else {}
    return RetentionState(
        last_run=last,
        last_counts={k: v for k, v in counts.items() if v},
        running=running,
        holds_in_force=holds_in_force().count(),
        policies=RetentionPolicy.objects.count(),
        default_policy=RetentionPolicy.objects.filter(agent__isnull=True).exists(),
        next_run_at=next_at,
        schedule_enabled=enabled,
    )
