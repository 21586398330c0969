"""Content of entries: text, or a list of content blocks; and the plain text of it."""

from __future__ import annotations

import json
import re
from typing import Any

REDACTED_TEXT = "[redacted]"
_WORDS = re.compile(r"\w+", re.UNICODE)


def words_of(text: str) -> str:
    """The text as its words, lower-cased, one space apart: what "word for word" compares."""
    return " ".join(_WORDS.findall(text.lower()))


def content_text(content: Any) -> str:
    """The readable text of a content value: the string, or its text and tool-result blocks joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                kind = block.get("type")
                if kind in ("text", "thinking"):
                    parts.append(str(block.get("text") or ""))
                elif kind == "tool_result":
                    output = block.get("output", block.get("content"))
                    parts.append(output if isinstance(output, str) else content_text(output))
        return "\n".join(p for p in parts if p)
    return json.dumps(content, ensure_ascii=False)
