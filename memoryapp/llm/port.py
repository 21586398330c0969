"""The language-model port: one call, `complete(system, messages, max_tokens, timeout)`.

Providers (chosen by LLM_PROVIDER): `openai` (any OpenAI-compatible chat completions endpoint),
`anthropic`, `none` (raises ModelUnavailable) and `scripted` (answers set by tests and benches).

Every call made while a job run is current (`recording_usage(run)`) adds its usage to that run,
so an operator sees what each job cost. Every call is also an audit record (`model.call`): the job
run and its kind, the provider and model, tokens, latency and cost, the thread run that caused it
(a write's `X-Run-Id`, carried by the job's arguments) when there is one; never the prompt or
the answer. A call that fails is recorded too (outcome `failed`, the error's type only).
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from django.conf import settings

from governance.audit.chain import audit_append
from governance.jobs.runs import job_add_usage, thread_run_current
from governance.models import JobRun
from memoryapp.llm.anthropic import AnthropicModel
from memoryapp.llm.model import Completion, LanguageModel, Message, ModelUnavailable, Usage
from memoryapp.llm.none import NoModel
from memoryapp.llm.openai import OpenAIChatModel
from memoryapp.llm.scripted import scripted_model

_override: LanguageModel | None = None
_current_run: contextvars.ContextVar[JobRun | None] = contextvars.ContextVar("llm_current_run", default=None)


def model_from_settings() -> LanguageModel:

    provider = settings.LLM_PROVIDER
    if provider == "openai":
        return OpenAIChatModel.from_settings()
    if provider == "anthropic":
        return AnthropicModel.from_settings()
    if provider == "scripted":
        return scripted_model()

    return NoModel()


def current_model() -> LanguageModel:
    """The model calls go to: the one set by `use_model`, else the provider of the settings."""
    return _override if _override is not None else model_from_settings()


def model_named(name: str | None) -> LanguageModel | None:
    """The current provider asking for the model `name` instead of its own (003 `summarizerModel`:
    a summarizer model distinct from the agent's); None for no name (the current model as it is).

    The provider, its address and key stay those of the settings: only the model name changes.
    """
    if not name:
        return None
    base = current_model()
    renamed = getattr(base, "with_model", None)
    if callable(renamed):
        return cast(LanguageModel, renamed(name))
    if dataclasses.is_dataclass(base) and any(f.name == "model" for f in dataclasses.fields(base)):
        return cast(LanguageModel, dataclasses.replace(base, model=name))  # type: ignore[type-var]
    return base  # `none` and other providers without a model name: they answer as they would


def model_available() -> bool:
    """Whether a model can answer (False for `none`, and for `scripted` with no script set)."""
    return bool(getattr(current_model(), "available", True))


@contextmanager
def use_model(model: LanguageModel | None) -> Iterator[LanguageModel | None]:
    """Send every call to `model` inside the block (tests, benches); None restores the settings."""
    global _override
    previous = _override
    _override = model
    try:
        yield model
    finally:
        _override = previous


@contextmanager
def recording_usage(run: JobRun | None) -> Iterator[None]:
    """Add the usage of every call made inside the block to `run`."""
    token = _current_run.set(run)
    try:
        yield
    finally:
        _current_run.reset(token)


def record_usage(usage: Usage) -> None:
    """Add one call's usage to the current job run (none outside a job) and audit the call."""

    run = _current_run.get()
    job_add_usage(
        run,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        latency_ms=usage.latency_ms,
    )
    model_call_audit(usage=usage, outcome="completed")


def model_call_audit(*, usage: Usage, outcome: str, error: type[BaseException] | None = None) -> None:
    """The audit record of one model call: ids, names and figures, never what was said."""
    run = _current_run.get()
    cost = usage.input_tokens * settings.LLM_PRICE_INPUT_PER_MTOK / 1e6
    cost += usage.output_tokens * settings.LLM_PRICE_OUTPUT_PER_MTOK / 1e6
    details: dict[str, Any] = {
        "job_run": run.pk if run is not None else None,
        "job": run.kind if run is not None else "",
        "thread_run": thread_run_current(run) or None,
        "provider": usage.provider,
        "model": usage.model,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "latency_ms": usage.latency_ms,
        "cost_usd": round(cost, 6),
    }
    if error is not None:
        details["error"] = error.__name__
    audit_append(
        action="model.call",
        actor=f"job:{run.kind}" if run is not None else "service",
        agent_id=run.agent_id if run is not None else None,
        subject=f"job_run:{run.pk}" if run is not None else "",
        outcome=outcome,
        details=details,
    )


def complete(
    *,
    system: str,
    messages: list[Message],
    max_tokens: int = 4000,
    timeout: float | None = None,
    model: LanguageModel | None = None,
    record: bool = True,
) -> Completion:
    """Ask the model once and record what it cost on the current job run, and in the audit trail.

    `record=False` leaves the recording to the caller (calls made in worker threads, which have
    no database connection of the job's): it passes the completion's usage to `record_usage`.
    """

    chosen = model or current_model()
    who = describe(chosen)
    started = time.monotonic()
    try:
        completion = chosen.complete(
            system=system,
            messages=messages,
            max_tokens=max_tokens,
            timeout=timeout if timeout is not None else settings.LLM_TIMEOUT,
        )
    except ModelUnavailable:
        raise  # no model was asked
    except Exception as exc:
        if record:
            latency = round((time.monotonic() - started) * 1000, 1)
            failed = Usage(latency_ms=latency, provider=who["provider"], model=who["model"])
            model_call_audit(usage=failed, outcome="failed", error=type(exc))
        raise
    usage = dataclasses.replace(
        completion.usage,
        latency_ms=completion.usage.latency_ms or round((time.monotonic() - started) * 1000, 1),
        provider=who["provider"],
        model=who["model"],
    )
    completion = Completion(completion.text, completion.finish_reason, usage)
    if record:
        record_usage(completion.usage)
    return completion


def describe(model: LanguageModel) -> dict[str, str]:
    return {"provider": str(getattr(model, "name", type(model).__name__)), "model": str(getattr(model, "model", ""))}
