"""What the consolidation tests share: active items of any trust, and a model that answers JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from memoryapp.items.services import item_approve
from memoryapp.llm.model import Completion, Message
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import MemoryItem
from tests.kit.factories import MemoryItemFactory


def active_item(**fields: Any) -> MemoryItem:
    """An item written by `item_write` and, when its trust left it suggested, approved by a reviewer
    (its trust stays what it was: a model's item approved is active and still the model's)."""
    item = MemoryItemFactory(**fields)
    if item.status == "suggested":
        item = item_approve(item=item, actor="staff:test")
    return item


def answers(*elements: Any) -> str:
    """A whole JSON array answer."""
    return json.dumps(list(elements))


def cut(*elements: Any) -> Completion:
    """An answer cut at its length limit inside its array (the model did not finish)."""
    text = json.dumps(list(elements))
    return Completion(text[: max(2, len(text) - 5)], "length")


def scripted(*script: str | Completion | BaseException) -> ScriptedModel:
    return ScriptedModel(list(script))


def answering(reply: Callable[[str], Any]) -> ScriptedModel:
    """A model whose answer is `reply(the user message)` (JSON-encoded unless text or a Completion)."""

    def answer(system: str, messages: list[Message]) -> Any:
        out = reply(messages[-1]["content"])
        return out if isinstance(out, str | Completion) else json.dumps(out)

    return ScriptedModel(answer)
