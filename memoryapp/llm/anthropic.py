"""Anthropic's Messages API: POST {base}/v1/messages with x-api-key and anthropic-version."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.conf import settings

from memoryapp.llm.http import post_json
from memoryapp.llm.model import Completion, Message, ModelError, Usage

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


@dataclass
class AnthropicModel:
    base_url: str
    model: str
    api_key: str = ""
    max_retries: int = 3
    name: str = "anthropic"
    available: bool = True

    @classmethod
    def from_settings(cls) -> AnthropicModel:

        return cls(
            base_url=settings.LLM_BASE_URL or DEFAULT_BASE_URL,
            model=settings.LLM_MODEL or "claude-haiku-4-5",
            api_key=settings.LLM_API_KEY,
            max_retries=settings.LLM_MAX_RETRIES,
        )

    def complete(self, *, system: str, messages: list[Message], max_tokens: int, timeout: float) -> Completion:
        headers = {
            "Content-Type": "application/json",
            "x-api-key": self.api_key,
            "anthropic-version": ANTHROPIC_VERSION,
        }
        body: dict[str, object] = {"model": self.model, "max_tokens": max_tokens, "messages": list(messages)}
        if system:
            body["system"] = system
        base = self.base_url.rstrip("/")
        # A base URL given with its /v1 (as OpenAI-style bases are) is accepted as well.
        url = base + ("/messages" if base.endswith("/v1") else "/v1/messages")
        started = time.monotonic()
        answer = post_json(url=url, headers=headers, body=body, timeout=timeout, max_retries=self.max_retries)
        latency_ms = round((time.monotonic() - started) * 1000, 1)
        blocks = answer.get("content")
        if not isinstance(blocks, list):
            raise ModelError("The messages answer has no content blocks.")
        text = "".join(str(b.get("text") or "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        stop_reason = answer.get("stop_reason") or "end_turn"
        usage = answer.get("usage") or {}
        return Completion(
            text=text,
            finish_reason="length"
            if stop_reason == "max_tokens"
            else "stop"
            if stop_reason == "end_turn"
            else stop_reason,
            usage=Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0), latency_ms),
        )
