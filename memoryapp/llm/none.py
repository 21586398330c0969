"""The `none` provider: no language model; jobs that need one are skipped and say why."""

from __future__ import annotations

from memoryapp.llm.model import Completion, Message, ModelUnavailable


class NoModel:
    name = "none"
    model = ""
    available = False

    def complete(self, *, system: str, messages: list[Message], max_tokens: int, timeout: float) -> Completion:
        raise ModelUnavailable("No language model is configured (LLM_PROVIDER=none).")
