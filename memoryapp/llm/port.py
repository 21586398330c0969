"""The language-model port: one call, `complete(system, messages, max_tokens, timeout)`.

Providers (chosen by LLM_PROVIDER): `openai` (any OpenAI-compatible chat completions endpoint),
`anthropic`, `none` (raises ModelUnavailable) and `scripted` (answers set by tests and benches).

Every call made while a job run is current (`recording_usage(run)`) adds its usage to that run,
so an operator sees what each job cost.
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from django.conf import settings

from governance.jobs.runs import job_add_usage
from governance.models import JobRun
from memoryapp.llm.anthropic import AnthropicModel
from memoryapp.llm.model import Completion, LanguageModel, Message, Usage
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
    """Add one call's usage to the current job run (none outside a job)."""

    job_add_usage(
        _current_run.get(),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        latency_ms=usage.latency_ms,
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
    """Ask the model once and record what it cost on the current job run.

    `record=False` leaves the recording to the caller (calls made in worker threads, which have
    no database connection of the job's).
    """

    chosen = model or current_model()
    started = time.monotonic()
    completion = chosen.complete(
        system=system,
        messages=messages,
        max_tokens=max_tokens,
        timeout=timeout if timeout is not None else settings.LLM_TIMEOUT,
    )
    if not completion.usage.latency_ms:
        usage = Usage(
            completion.usage.input_tokens,
            completion.usage.output_tokens,
            round((time.monotonic() - started) * 1000, 1),
        )
        completion = Completion(completion.text, completion.finish_reason, usage)
    if record:
        record_usage(completion.usage)
    return completion


def describe(model: LanguageModel) -> dict[str, Any]:
    return {"provider": getattr(model, "name", type(model).__name__), "model": getattr(model, "model", "")}
