"""Token counting without a tokenizer (000 `estimateContextTokens`, 004 "Token Counting").

About four characters a token, and four tokens of framing per message. Tool calls count their
name and their serialized arguments, tool results their serialized output, images the length
of their base64 data (a URL-only image counts as a fixed IMAGE_URL_TOKENS).
"""

from __future__ import annotations

import json
import math
from typing import Any

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
IMAGE_URL_TOKENS = 1000


def count_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def _serialized(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def count_block_chars(block: Any) -> int:
    """Characters of one content block, as 000 counts them."""
    if isinstance(block, str):
        return len(block)
    if not isinstance(block, dict):
        return 0
    kind = block.get("type")
    if kind in ("text", "thinking"):
        return len(str(block.get("text") or block.get("thinking") or ""))
    if kind in ("tool_call", "tool_use"):
        return len(str(block.get("name") or "")) + len(_serialized(block.get("input", block.get("arguments"))))
    if kind == "tool_result":
        return len(_serialized(block.get("output", block.get("content"))))
    if kind == "image":
        data = block.get("data") or block.get("dataBase64") or (block.get("source") or {}).get("data")
        return len(data) if isinstance(data, str) else IMAGE_URL_TOKENS * CHARS_PER_TOKEN
    if kind == "image_url":  # the OpenAI form: a data URL is counted as its base64, a link as an image
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if isinstance(url, str) and url.startswith("data:"):
            return len(url.split(",", 1)[-1])
        return IMAGE_URL_TOKENS * CHARS_PER_TOKEN
    # 000 counts any other block as nothing; a budget that must hold counts what it would send.
    return len(_serialized(block))


def count_content_chars(content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(count_block_chars(block) for block in content)
    return len(_serialized(content))


def count_tool_calls_tokens(tool_calls: Any) -> int:
    if not tool_calls:
        return 0
    chars = 0
    for call in tool_calls:
        if isinstance(call, dict):
            chars += len(str(call.get("name") or "")) + len(_serialized(call.get("arguments", call.get("input"))))
    return math.ceil(chars / CHARS_PER_TOKEN)


def count_message_tokens(content: Any, tool_calls: Any = None) -> int:
    """Tokens of one message: its content, its tool calls, and the framing."""
    if not tool_calls and type(content) is str:
        # Most messages: a plain text and no tool call (a context build counts each row of its
        # window; issue 26). The same figure as below, without its calls.
        return -(-len(content) // CHARS_PER_TOKEN) + MESSAGE_OVERHEAD
    return (
        math.ceil(count_content_chars(content) / CHARS_PER_TOKEN)
        + count_tool_calls_tokens(tool_calls)
        + MESSAGE_OVERHEAD
    )


def count_messages_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(count_message_tokens(m.get("content"), m.get("tool_calls")) for m in messages)
