"""Threads filled with real conversations for admin pages, browser tests and screenshots.

The turns come from ../shared/data/locomo (LoCoMo, CC BY-NC 4.0, evaluation use): two people
talking over months, with session dates. `locomo_thread` writes N of them to a thread through the
services (batches of `entries_add`, as an agent's import would), speaker A as the user and speaker
B as the assistant, each with their name; every `tools_every` turns the assistant looks something
up (a tool call and its result), so pages show tools as they are in real threads.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryapp.models import Agent, Thread
from memoryapp.threads.services import entries_add, thread_create
from memoryapp.threads.validation import MAX_BATCH_ENTRIES

LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo_dev.json"


@functools.cache
def locomo_turns() -> list[dict[str, Any]]:
    """Every turn of the split, conversation after conversation: speaker, role, text, time."""
    if not LOCOMO.exists():
        pytest.skip(f"{LOCOMO} is not here")
    turns: list[dict[str, Any]] = []
    shift = timedelta(0)  # each conversation is moved to start a day after the one before ends
    for sample in json.loads(LOCOMO.read_text()):
        talk = sample["conversation"]
        first = talk["speaker_a"]
        if turns:
            opened = datetime.strptime(talk["session_1_date_time"], "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
            shift = turns[-1]["at"] + timedelta(days=1) - opened
        number = 1
        while f"session_{number}" in talk:
            started = datetime.strptime(talk[f"session_{number}_date_time"], "%I:%M %p on %d %B, %Y") + shift
            for index, turn in enumerate(talk[f"session_{number}"]):
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f"\n[shares a photo: {turn['blip_caption']}]"
                turns.append(
                    {
                        "speaker": turn["speaker"],
                        "role": "user" if turn["speaker"] == first else "assistant",
                        "text": text,
                        "at": started.replace(tzinfo=UTC) + timedelta(minutes=index),
                    }
                )
            number += 1
    return turns


def locomo_specs(count: int, *, start: int = 0, tools_every: int = 0) -> list[dict[str, Any]]:
    """`count` entries to write (turns from `start`, cycling), with tool calls every `tools_every`."""
    source = locomo_turns()
    specs: list[dict[str, Any]] = []
    index = start
    while len(specs) < count:
        turn = source[index % len(source)]
        # A pass over the data again moves on in time, so entries stay in order.
        at = turn["at"] + (source[-1]["at"] - source[0]["at"] + timedelta(days=1)) * (index // len(source))
        specs.append({"role": turn["role"], "content": turn["text"], "sender_name": turn["speaker"], "created_at": at})
        index += 1
        if tools_every and index % tools_every == 0 and len(specs) + 2 <= count:
            call_id = f"call-{index}"
            specs.append(
                {
                    "role": "assistant",
                    "content": "Let me look that up.",
                    "tool_calls": [{"id": call_id, "name": "search_notes", "arguments": {"query": turn["text"][:60]}}],
                    "created_at": at + timedelta(seconds=20),
                }
            )
            specs.append(
                {
                    "type": "tool_result",
                    "tool_call_id": call_id,
                    "content": f"3 notes found for {turn['speaker']}:\n- " + "\n- ".join([turn["text"][:80]] * 3),
                    "created_at": at + timedelta(seconds=30),
                }
            )
    return specs


def locomo_thread(
    *, agent: Agent, external_id: str, turns: int, user_id: str = "", tools_every: int = 0, start: int = 0
) -> Thread:
    """A thread of `turns` entries of real conversation, written through the services."""
    thread = thread_create(agent=agent, external_id=external_id, user_id=user_id)
    specs = locomo_specs(turns, start=start, tools_every=tools_every)
    for offset in range(0, len(specs), MAX_BATCH_ENTRIES):
        entries_add(thread=thread, entries=specs[offset : offset + MAX_BATCH_ENTRIES])
    thread.refresh_from_db()
    return thread


@functools.cache
def locomo_questions() -> list[str]:
    """Every question of the split, conversation after conversation."""
    if not LOCOMO.exists():
        pytest.skip(f"{LOCOMO} is not here")
    return [qa["question"] for sample in json.loads(LOCOMO.read_text()) for qa in sample["qa"]]
