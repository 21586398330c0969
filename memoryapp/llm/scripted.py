"""The `scripted` provider: answers from a list or a function, set by tests and benches.

    with use_model(ScriptedModel(["first answer", Completion("cut", "length")])): ...
    set_script(lambda system, messages: "[]")   # what LLM_PROVIDER=scripted answers process-wide

With no script set, the provider behaves like `none` (unavailable), so tests of other areas
that add entries never start model work they did not ask for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from threading import Lock
from typing import Any

from memoryapp.llm.model import Completion, Message, ModelError, ModelUnavailable, Usage
from memoryapp.tokens import count_tokens

Answer = str | Completion | BaseException
Script = Sequence[Answer] | Callable[[str, list[Message]], Answer]


@dataclass
class ScriptedCall:
    system: str
    messages: list[Message]
    max_tokens: int
    timeout: float
    # The model asked for (`model_named`: a summarizer model), else the provider's own.
    model: str = "scripted"


@dataclass
class ScriptedModel:
    """Answers from `script`: a list (one answer per call, in order) or a function of the request.

    An answer may be text (finish_reason "stop"), a Completion, or an exception to raise.
    """

    script: Script
    name: str = "scripted"
    model: str = "scripted"
    available: bool = True
    calls: list[ScriptedCall] = field(default_factory=list)
    _lock: Lock = field(default_factory=Lock, repr=False)

    def complete(self, *, system: str, messages: list[Message], max_tokens: int, timeout: float) -> Completion:
        with self._lock:
            self.calls.append(ScriptedCall(system, list(messages), max_tokens, timeout, self.model))
            index = len(self.calls) - 1
        if callable(self.script):
            answer: Any = self.script(system, messages)
        else:
            if index >= len(self.script):
                raise ModelError(f"The script has no answer for call {index + 1}.")
            answer = self.script[index]
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, Completion):
            return answer
        prompt_tokens = count_tokens(system) + sum(count_tokens(m.get("content", "")) for m in messages)
        return Completion(str(answer), "stop", Usage(prompt_tokens, count_tokens(str(answer)), 0.0))

    def with_model(self, name: str) -> ScriptedModel:
        """The same script and record of calls, each call recording `name` as its model."""
        return replace(self, model=name)


class _Unscripted:
    name = "scripted"
    model = "scripted"
    available = False

    def complete(self, *, system: str, messages: list[Message], max_tokens: int, timeout: float) -> Completion:
        raise ModelUnavailable("The scripted model has no script set.")


_process_script: ScriptedModel | None = None


def set_script(script: Script | None) -> ScriptedModel | None:
    """Set (or clear, with None) what LLM_PROVIDER=scripted answers in this process."""
    global _process_script
    _process_script = ScriptedModel(script) if script is not None else None
    return _process_script


def scripted_model() -> ScriptedModel | _Unscripted:
    return _process_script if _process_script is not None else _Unscripted()
