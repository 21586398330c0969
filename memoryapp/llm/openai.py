"""OpenAI-compatible chat completions (OpenAI, Ollama, vLLM, LM Studio): POST {base}/chat/completions."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.conf import settings

from memoryapp.llm.http import post_json
from memoryapp.llm.model import Completion, Message, ModelError, Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass
class OpenAIChatModel:
    base_url: str
    model: str
    api_key: str = ""
    max_retries: int = 3
    name: str = "openai"
    available: bool = True

    @classmethod
    def from_settings(cls) -> OpenAIChatModel:

        return cls(
            base_url=settings.LLM_BASE_URL or DEFAULT_BASE_URL,
            model=settings.LLM_MODEL or "gpt-4o-mini",
            api_key=settings.LLM_API_KEY,
            max_retries=settings.LLM_MAX_RETRIES,
        )

    def complete(self, *, system: str, messages: list[Message], max_tokens: int, timeout: float) -> Completion:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, *messages] if system else list(messages),
            "max_tokens": max_tokens,
        }
        started = time.monotonic()
        answer = post_json(
            url=self.base_url.rstrip("/") + "/chat/completions",
            headers=headers,
            body=body,
            timeout=timeout,
            max_retries=self.max_retries,
        )
        latency_ms = round((time.monotonic() - started) * 1000, 1)
        try:
            choice = answer["choices"][0]
            text = choice["message"].get("content") or ""
            finish_reason = choice.get("finish_reason") or "stop"
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ModelError("The chat completions answer has no choices[0].message.") from exc
        usage = answer.get("usage") or {}
        return Completion(
            text=str(text),
            finish_reason="length" if finish_reason == "length" else str(finish_reason),
            usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), latency_ms),
        )
