"""Automatic compaction (004 "Sessions and Compaction", 000 `shouldCompact`, 003 `preStep`).

An agent's `CompactionSettings` (enabled, context window, trigger share, strategy, keep_recent and
the summarizer options), overridden key by key by a thread's `Thread.compaction`, decide when a
thread is compacted without being asked:

1. After a write that added entries commits (the threads' hook, `entries_added_follow`, so single
   appends, batches, imports and the MCP `thread_append` all pass here), `auto_compaction_check`
   reads the thread's running count of history tokens (`Thread.history_tokens`, kept by the
   appends; counted from the branch once when unknown) and its settings, in one query.
2. At `context_window * trigger_ratio` tokens or more, or `message_threshold` entries of the history
   as the model sees it (004 messageThreshold, whichever comes first; counted only once the thread
   has written that many entries), a Redis mark (`SET NX`) per thread lets one
   append send the job, AUTO_COMPACTION_DEBOUNCE_SECONDS later: the appends of a burst join it.
   The mark stays until the job ends, so no second job of the thread is sent while one waits or
   runs; the job also holds the thread's COMPACTION advisory lock, so two never run at once.
3. The job checks again when it runs (settings, exact tokens): a thread compacted meanwhile (by
   hand, or before a model step) is under its trigger and the job does nothing.
4. With `pre_step`, the agent's context request (the call before its next model step) compacts a
   thread past its trigger in the request first, so the model never gets an over-full history.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from governance import locks
from governance.audit.chain import audit_append
from governance.jobs.broker import debounce_mark, debounce_mark_set, job_debounce_clear, job_enqueue
from governance.jobs.runs import job_run, job_skip
from governance.models import JobRun
from memoryapp.compaction.history import compacted_history
from memoryapp.compaction.plan import CLEAR_TOOL_RESULTS, HIERARCHICAL, SUMMARIZE
from memoryapp.compaction.policy import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_KEEP_RECENT,
    DEFAULT_TRIGGER_RATIO,
    history_tokens,
    should_compact_tokens,
    thread_branch,
)
from memoryapp.compaction.services import JOB_KIND, CompactionOutcome, compaction_run
from memoryapp.errors import Conflict, DomainError
from memoryapp.llm.model import ModelError, ModelUnavailable
from memoryapp.llm.port import model_available
from memoryapp.models import Agent, CompactionSettings, Thread
from memoryapp.models.choices import AutoCompactionStrategy
from memoryapp.precompiled import Precompiled
from memoryapp.prompts import SUMMARY_TEMPLATES

logger = logging.getLogger(__name__)

# The job that runs `auto_compaction_job` (memoryapp.tasks.compaction), sent by name.
AUTO_JOB_TASK = "memoryapp.tasks.auto_compact_thread"
AUTO_ACTOR = "auto-compaction"
# How long a thread's pending mark outlives the debounce: the job's time limit and then some, so a
# run lost before it ends does not stop the thread's automatic compaction for longer than this.
PENDING_GRACE_SECONDS = 900
MAX_CONTEXT_WINDOW = 100_000_000
MAX_KEEP_RECENT = 10_000
MAX_MESSAGE_THRESHOLD = 1_000_000
# A model name as providers spell them: gpt-4o-mini, claude-haiku-4-5, llama3.1:8b, org/model@rev.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")


@dataclass(frozen=True)
class AutoCompaction:
    """The automatic compaction a thread gets: its agent's settings with the thread's over them."""

    enabled: bool = False
    context_window: int = DEFAULT_CONTEXT_WINDOW
    trigger_ratio: float = DEFAULT_TRIGGER_RATIO
    strategy: str = SUMMARIZE
    keep_recent: int = DEFAULT_KEEP_RECENT
    summarizer_model: str = ""
    template_name: str = ""
    pre_step: bool = False
    # 004 messageThreshold: entries of the history (as the model sees it) at which to compact too.
    message_threshold: int | None = None

    @property
    def trigger_tokens(self) -> int:
        return int(self.context_window * self.trigger_ratio + 0.999999)

    def passes(self, tokens: int, entries: int | None = None) -> bool:
        """At the trigger: `tokens` at the token trigger, or `entries` (when counted) at
        `message_threshold`, whichever comes first (004)."""
        if not self.enabled:
            return False
        if self.message_threshold is not None and entries is not None and entries >= self.message_threshold:
            return True
        return should_compact_tokens(tokens, self.context_window, self.trigger_ratio)

    def may_pass_by_count(self, thread: Thread) -> bool:
        """Whether the entry count could be at `message_threshold`: the thread has written at
        least that many entries (next_seq), so counting its history is worth a read."""
        return self.message_threshold is not None and thread.next_seq - 1 >= self.message_threshold

    def strategy_options(self) -> dict[str, Any]:
        """The options of the compaction request this configuration makes (plan.py's names)."""
        summarizer: dict[str, Any] = {}
        if self.summarizer_model:
            summarizer["summarizer_model"] = self.summarizer_model
        if self.template_name:
            summarizer["template_name"] = self.template_name
        if self.strategy == SUMMARIZE:
            return {"preserve_recent_turns": self.keep_recent, **summarizer}
        if self.strategy == CLEAR_TOOL_RESULTS:
            # Still over the trigger after clearing: the summary fallback keeps `keep_recent`.
            return {
                "context_window": self.context_window,
                "trigger_ratio": self.trigger_ratio,
                "summarize_fallback": {"preserve_recent_turns": self.keep_recent, **summarizer},
            }
        # hierarchical: the newest `keep_recent` entries stay (not a token budget).
        options: dict[str, Any] = {"keep_recent": self.keep_recent, "keep_recent_tokens": None}
        if self.summarizer_model:
            options["summarizer_model"] = self.summarizer_model
        return options

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


SETTING_NAMES = tuple(f.name for f in fields(AutoCompaction))
_DEFAULTS = AutoCompaction()
# Read (never written) by every resolve: `asdict` of the defaults on each append cost ~2% of its web CPU.
_DEFAULT_VALUES = _DEFAULTS.as_json()


def _check_value(name: str, value: Any, *, field_prefix: str = "") -> Any:
    """One setting checked and normalised; DomainError naming the field when it is wrong."""
    where = field_prefix + name

    def wrong(message: str) -> DomainError:
        return DomainError("invalid_value", message, field=where)

    if name in ("enabled", "pre_step"):
        if not isinstance(value, bool):
            raise wrong(f"{name} must be true or false.")
        return value
    if name == "message_threshold":
        if value is None:
            return None  # by tokens only
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MESSAGE_THRESHOLD:
            raise wrong(f"message_threshold must be a whole number from 1 to {MAX_MESSAGE_THRESHOLD}, or null.")
        return value
    if name in ("context_window", "keep_recent"):
        low, high = (1, MAX_CONTEXT_WINDOW) if name == "context_window" else (0, MAX_KEEP_RECENT)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise wrong(f"{name} must be a whole number from {low} to {high}.")
        return value
    if name == "trigger_ratio":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise wrong("trigger_ratio must be a number above 0 and at most 1 (a share of the window).")
        return float(value)
    if name == "strategy":
        if value not in AutoCompactionStrategy.values:
            raise wrong(f"strategy must be one of {', '.join(AutoCompactionStrategy.values)}.")
        return value
    if name == "summarizer_model":
        if not isinstance(value, str) or (value and not MODEL_NAME.match(value)):
            raise wrong("summarizer_model must be a model name (letters, digits and . _ : / @ + -, at most 200).")
        return value
    if name == "template_name":
        if not isinstance(value, str) or (value and value not in SUMMARY_TEMPLATES):
            raise wrong(f"template_name must be one of {', '.join(SUMMARY_TEMPLATES)} (or empty: default).")
        return value
    raise DomainError("unknown_field", f"{name} is not a setting of automatic compaction.", field=where)


def auto_compaction_values(given: Any, *, field_prefix: str = "", allow_null: bool = False) -> dict[str, Any]:
    """The settings of `given` checked (only its keys); a null value with `allow_null` (a thread's
    override: back to the agent's) is kept as None."""
    if not isinstance(given, dict):
        raise DomainError("invalid_type", "Expected an object of settings.", field=field_prefix.rstrip(".") or None)
    values: dict[str, Any] = {}
    for name, value in given.items():
        if name not in SETTING_NAMES:
            raise DomainError(
                "unknown_field", f"{name} is not a setting of automatic compaction.", field=field_prefix + name
            )
        if value is None and allow_null:
            values[name] = None
            continue
        values[name] = _check_value(name, value, field_prefix=field_prefix)
    return values


# An agent's settings row (the agent is its primary key: one row or none). Compiled once
# (memoryapp.precompiled): every hybrid context build reads it for its pre-step, where the ORM's
# compilation of this lookup was ~30% of the view's web CPU under the mixed load (issue 26).
_AGENT_SETTINGS = Precompiled(lambda agent_id: CompactionSettings.objects.filter(agent_id=agent_id), -26)


def _agent_settings_row(agent_id: int) -> CompactionSettings | None:
    return _AGENT_SETTINGS.first(agent_id)


def _settings_dict(row: CompactionSettings | None) -> dict[str, Any]:
    if row is None:
        return {}
    return {name: getattr(row, name) for name in SETTING_NAMES}


def auto_compaction_resolve(agent_settings: dict[str, Any] | None, override: Any) -> AutoCompaction:
    """The defaults, the agent's settings over them, the thread's over those (keys that check)."""
    if not agent_settings and not override:
        return _DEFAULTS  # frozen: the same defaults for every thread that sets nothing
    values = {**_DEFAULT_VALUES, **(agent_settings or {})}
    if isinstance(override, dict):
        for name, value in override.items():
            if name in SETTING_NAMES and value is not None:
                with contextlib.suppress(DomainError):
                    values[name] = _check_value(name, value)
    return AutoCompaction(**{name: values[name] for name in SETTING_NAMES})


def auto_compaction_combination_check(config: AutoCompaction, *, field: str) -> None:
    """Settings that check one by one but not together: DomainError naming `field`."""
    # A named summary template has nothing to name in a hierarchical tree (its prompt asks for atoms).
    if config.strategy == HIERARCHICAL and config.template_name:
        raise DomainError(
            "invalid_value",
            "template_name applies to summaries (summarize-old-preserve-recent, and clearing's fallback), "
            "not to hierarchical.",
            field=field,
        )


# --- reads -----------------------------------------------------------------------------------------


def agent_compaction_settings(*, agent: Agent) -> AutoCompaction:
    """The agent's automatic compaction (the defaults, off, when it never set any)."""
    row = _agent_settings_row(agent.pk)
    return auto_compaction_resolve(_settings_dict(row), None)


def thread_auto_compaction(*, thread: Thread) -> AutoCompaction:
    """What the thread gets: its agent's settings with the thread's own over them."""
    row = _agent_settings_row(thread.agent_id)
    return auto_compaction_resolve(_settings_dict(row), thread.compaction)


# --- writes ----------------------------------------------------------------------------------------


@transaction.atomic
def agent_compaction_settings_set(*, agent: Agent, values: dict[str, Any], actor: str) -> AutoCompaction:
    """Change the agent's automatic compaction (only the keys given); audited with the names changed."""
    checked = auto_compaction_values(values)
    row, _ = CompactionSettings.objects.select_for_update().get_or_create(agent=agent)
    before = _settings_dict(row)
    config = auto_compaction_resolve({**before, **checked}, None)
    auto_compaction_combination_check(config, field="template_name" if "template_name" in checked else "strategy")
    changed = sorted(name for name, value in checked.items() if before.get(name) != value)
    _settings_cache.pop(agent.pk, None)  # this process sees the change at once; others within the TTL
    if changed:
        for name in changed:
            setattr(row, name, checked[name])
        row.save()
        audit_append(
            action="agent.compaction_set",
            actor=actor,
            agent_id=agent.pk,
            subject=agent.slug,
            outcome="on" if config.enabled else "off",
            details={"changed": changed},
        )
    return config


@transaction.atomic
def thread_compaction_set(*, thread: Thread, values: dict[str, Any], actor: str) -> AutoCompaction:
    """Set the thread's own automatic compaction over its agent's (a null value goes back to the
    agent's); audited with the names changed. Returns what the thread gets now."""
    checked = auto_compaction_values(values, allow_null=True)
    locked = Thread.objects.select_for_update().get(pk=thread.pk)
    override = dict(locked.compaction) if isinstance(locked.compaction, dict) else {}
    before = dict(override)
    for name, value in checked.items():
        if value is None:
            override.pop(name, None)
        else:
            override[name] = value
    row = _agent_settings_row(locked.agent_id)
    config = auto_compaction_resolve(_settings_dict(row), override)
    auto_compaction_combination_check(config, field="template_name" if "template_name" in checked else "strategy")
    if override != before:
        Thread.objects.filter(pk=locked.pk).update(compaction=override)
        audit_append(
            action="thread.compaction_set",
            actor=actor,
            agent_id=locked.agent_id,
            thread_id=locked.external_id,
            person=locked.user_id,
            subject=locked.external_id,
            outcome="on" if config.enabled else "off",
            details={"changed": sorted(k for k in set(before) | set(override) if before.get(k) != override.get(k))},
        )
    thread.compaction = override
    return config


# --- the trigger -----------------------------------------------------------------------------------


def auto_compaction_key(thread_pk: int) -> str:
    return f"autocompact:{thread_pk}"


def _count_history(thread: Thread) -> int:
    """The exact history tokens of the thread's active branch, as the model sees it now."""
    return history_tokens(compacted_history(thread_branch(thread)))


def history_entries_count(*, thread: Thread, config: AutoCompaction) -> int | None:
    """The entries of the thread's history as the model sees it (after the newest compaction's
    cut), or None when `message_threshold` is off or cannot be reached yet (no read then)."""
    if not config.may_pass_by_count(thread):
        return None
    thread.refresh_from_db(fields=["active_leaf", "next_seq", "branch_epoch"])
    return len(compacted_history(thread_branch(thread)).entries)


def history_tokens_recount(*, thread: Thread) -> int:
    """Count the thread's history tokens from its branch and keep the count, unless a write changed
    the thread since it was read (its next_seq or branch), which leaves the count unknown."""
    seen = Thread.objects.filter(pk=thread.pk).values_list("next_seq", "branch_epoch").first()
    if seen is None:
        return 0
    thread.refresh_from_db(fields=["active_leaf", "next_seq", "branch_epoch"])
    tokens = _count_history(thread)
    Thread.objects.filter(pk=thread.pk, next_seq=seen[0], branch_epoch=seen[1]).update(history_tokens=tokens)
    return tokens


# agent id -> (time.monotonic() it is good until, the agent's settings or None): the check after
# appends reads them from here, so an append costs no query for them.
_settings_cache: dict[int, tuple[float, dict[str, Any] | None]] = {}


def _cached_agent_settings(agent_id: int) -> dict[str, Any] | None:
    now = time.monotonic()
    cached = _settings_cache.get(agent_id)
    if cached is not None and cached[0] > now:
        return cached[1]
    values = _settings_dict(_agent_settings_row(agent_id)) or None
    _settings_cache[agent_id] = (now + settings.AUTO_COMPACTION_SETTINGS_TTL_SECONDS, values)
    return values


# thread pk -> time.monotonic() until which this process takes a run of the thread as pending (it
# sent one, or found one pending): the appends of a burst past the trigger skip the Redis round
# trip. At worst a crossing right after a run ended waits this long (the debounce) for the next.
_pending_seen: dict[int, float] = {}
PENDING_SEEN_MAX = 10_000


def auto_compaction_check(*, thread_pk: int) -> JobRun | None:
    """`auto_compaction_check_thread` for a thread known by its pk (read from the database)."""
    thread = Thread.objects.filter(pk=thread_pk).first()
    return auto_compaction_check_thread(thread=thread) if thread is not None else None


def auto_compaction_check_thread(*, thread: Thread) -> JobRun | None:
    """After a committed write to the thread: send its compaction job when it passed its trigger.

    Cheap: `thread` is the row the write read under its lock, with the running count of history
    tokens the write left (Thread.history_tokens), and the agent's settings come from a cache
    (AUTO_COMPACTION_SETTINGS_TTL_SECONDS): a thread under its trigger, or off, costs no query.
    See the module's steps.
    """
    config = auto_compaction_resolve(_cached_agent_settings(thread.agent_id), thread.compaction)
    if not config.enabled:
        return None
    if config.strategy == SUMMARIZE and not model_available():
        # A run that could only be skipped, on every append past the trigger, would bury the job
        # list (as extraction does); the zero-model strategies still run.
        return None
    tokens = thread.history_tokens
    if tokens is None:
        tokens = history_tokens_recount(thread=thread)
    entries = None
    if not config.passes(tokens) and config.may_pass_by_count(thread):
        entries = history_entries_count(thread=thread, config=config)
    if not config.passes(tokens, entries):
        return None
    thread_pk = thread.pk
    key = auto_compaction_key(thread_pk)
    debounce = settings.AUTO_COMPACTION_DEBOUNCE_SECONDS
    now = time.monotonic()
    if _pending_seen.get(thread_pk, 0.0) > now:
        return None  # this process saw a run of the thread pending just now: no Redis round trip
    if len(_pending_seen) > PENDING_SEEN_MAX:
        _pending_seen.clear()
    _pending_seen[thread_pk] = now + max(debounce, 1.0)
    if not debounce_mark_set(debounce_mark(key), ttl=int(debounce) + PENDING_GRACE_SECONDS):
        return None  # one is pending or running: this append joins it
    return job_enqueue(
        kind=JOB_KIND,
        task_name=AUTO_JOB_TASK,
        arguments={
            "thread_pk": thread_pk,
            "source": "auto-trigger",
            "tokens": tokens,
            "trigger_tokens": config.trigger_tokens,
            **({"entries": entries, "message_threshold": config.message_threshold} if entries is not None else {}),
        },
        agent_id=thread.agent_id,
        dedupe_key=key,
        countdown=debounce,
    )


@contextlib.contextmanager
def thread_compaction_lock(thread_pk: int) -> Iterator[bool]:
    """The thread's COMPACTION advisory lock (session level, not waited for): True when taken."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", locks.pair(locks.COMPACTION, thread_pk))
        row = cursor.fetchone()
    taken = bool(row and row[0])
    try:
        yield taken
    finally:
        if taken:
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", locks.pair(locks.COMPACTION, thread_pk))


def _compact_if_over(run: JobRun, thread: Thread, *, source: str) -> dict[str, Any] | None:
    """The re-check and the compaction, under the thread's lock (see auto_compaction_job)."""
    config = thread_auto_compaction(thread=thread)
    if not config.enabled:
        job_skip(run, "automatic compaction is off for this thread")
        return None
    tokens = history_tokens_recount(thread=thread)
    entries = history_entries_count(thread=thread, config=config)
    base: dict[str, Any] = {"strategy": config.strategy, "tokens": tokens, "trigger_tokens": config.trigger_tokens}
    if entries is not None:
        base.update(entries=entries, message_threshold=config.message_threshold)
    if not config.passes(tokens, entries):
        return {**base, "compacted": False, "reason": "under the trigger"}
    if config.strategy == SUMMARIZE and not model_available():
        job_skip(run, f"no language model is configured (LLM_PROVIDER=none): {config.strategy} needs one")
        return {"skipped": "no language model"}
    try:
        outcome: CompactionOutcome = compaction_run(
            thread=thread,
            strategy=config.strategy,
            options=config.strategy_options(),
            run=run,
            actor=AUTO_ACTOR,
            source=source,
        )
    except ModelUnavailable as exc:
        job_skip(run, f"no language model is configured: {exc}")
        return {"skipped": "no language model"}
    except Conflict as refused:
        # Another compaction was written, or what this one covered changed, while it ran.
        return {**base, "compacted": False, "reason": refused.code}
    return {**base, **outcome.as_result()}


def auto_compaction_job(run: JobRun) -> dict[str, Any] | None:
    """The body of an automatic compaction run: check again, then compact with the thread's settings.

    1. The thread's lock: another compaction of it running means this run does nothing.
    2. The settings and the exact tokens again: off, or under the trigger (compacted meanwhile),
       and nothing is written.
    3. `compaction_run` with the configured strategy and options, source `auto-trigger`.
    4. The pending mark is cleared at the end, so the next append past the trigger sends the next
       run; when the thread is still past its trigger after the run (the strategy could not bring it
       under), the mark is left to expire (PENDING_GRACE_SECONDS), so appends do not each send a run
       that could only do as little again.
    """
    arguments = run.arguments or {}
    thread_pk = int(arguments.get("thread_pk") or 0)
    thread = Thread.objects.filter(pk=thread_pk).first()
    if thread is None:
        job_debounce_clear(auto_compaction_key(thread_pk))
        job_skip(run, "the thread was deleted")
        return None
    keep_mark = False
    try:
        with thread_compaction_lock(thread.pk) as taken:
            if not taken:
                keep_mark = True  # the mark is the running one's: it clears it as it ends
                return {"compacted": False, "reason": "another compaction of this thread is running"}
            result = _compact_if_over(run, thread, source=str(arguments.get("source") or "auto-trigger"))
            if result is not None and "skipped" in result:
                keep_mark = True  # no model: the next run waits for the mark to expire
                return None  # the run is skipped, with its reason
            if result is not None and result.get("reason") != "under the trigger":
                # Still past the trigger after the strategy did what it could (the kept tail alone
                # fills it, or clearing without a model): no run per append until the mark expires.
                still = history_tokens_recount(thread=thread)
                config = thread_auto_compaction(thread=thread)
                keep_mark = config.passes(still, history_entries_count(thread=thread, config=config))
                if keep_mark:
                    result["still_over_trigger"] = still
            return result
    except Exception:
        keep_mark = True  # a failed run (the model down): no run per append until the mark expires
        raise
    finally:
        if not keep_mark:
            job_debounce_clear(auto_compaction_key(thread_pk))
            _pending_seen.pop(thread_pk, None)


def compaction_pre_step(*, thread: Thread) -> JobRun | None:
    """003 `preStep`: before the agent's next model step (its context request), compact the thread
    in this process when it passed its trigger and its settings ask for it; else do nothing.

    Never raises: a failed compaction (the model, a conflict) is recorded on its job run and the
    context is built from the thread as it is. A compaction of the thread already running is not
    waited for.
    """
    row = _agent_settings_row(thread.agent_id)
    config = auto_compaction_resolve(_settings_dict(row), thread.compaction)
    if not (config.enabled and config.pre_step):
        return None
    tokens = Thread.objects.filter(pk=thread.pk).values_list("history_tokens", flat=True).first()
    if tokens is None:
        tokens = history_tokens_recount(thread=thread)
    if not config.passes(tokens, history_entries_count(thread=thread, config=config)):
        return None
    run = JobRun.objects.create(
        kind=JOB_KIND,
        agent_id=thread.agent_id,
        task_name=AUTO_JOB_TASK,
        arguments={"thread_pk": thread.pk, "source": "pre-step", "tokens": tokens},
    )
    try:
        job_run(run.pk, auto_compaction_job)
    except (ModelError, DomainError, DatabaseError):
        logger.warning("pre-step compaction of thread %s failed (job run %s)", thread.pk, run.pk, exc_info=True)
    thread.refresh_from_db()
    run.refresh_from_db()
    return run
