"""What a language model is to this service: the one call providers implement, what it answers
(text, finish reason, usage) and how it fails."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# One message of the conversation sent to the model: {"role": "user" | "assistant", "content": str}.
Message = dict[str, str]


class ModelError(Exception):
    """The model could not answer: a refused request, or retries ran out."""


class ModelUnavailable(ModelError):
    """No language model is configured (LLM_PROVIDER=none): only the zero-model work runs."""


class ModelTransientError(ModelError):
    """A failure worth asking again for: 429, 5xx, a dropped connection, a timeout."""


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    # Who answered (set by the port's `complete`): the provider and its model's name.
    provider: str = ""
    model: str = ""


@dataclass(frozen=True)
class Completion:
    text: str
    # "stop" for a finished answer, "length" when cut at max_tokens, else the provider's word.
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)


class LanguageModel(Protocol):
    name: str

    def complete(self, *, system: str, messages: list[Message], max_tokens: int, timeout: float) -> Completion: ...
