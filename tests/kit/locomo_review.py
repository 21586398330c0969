"""Fixture helpers: realistic conversations and the suggestions a model would make from them.

`locomo_thread` turns one LoCoMo conversation (../shared/data/locomo, CC BY-NC 4.0, evaluation
only) into a thread through the services: each session's turns in order, the two speakers as
`user` and `assistant` with their names, the session's date as the entries' time.
`locomo_suggestions` writes, for its single-hop questions, the answer as a suggested item quoting
the turn the benchmark names as evidence. Without the data file, a small made-up conversation
stands in, so the tests that use these still run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from memoryapp.items.services import item_write
from memoryapp.models import Agent, Entry, MemoryItem, Thread
from memoryapp.threads.services import entries_add, thread_create

LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo_dev.json"

_STAND_IN = {
    "sample_id": "stand-in",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I stopped eating meat last spring, I am vegetarian now."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Good for you! Where are you living these days?"},
            {"speaker": "Ana", "dia_id": "D1:3", "text": "We moved to Porto in January, near the river."},
            {"speaker": "Ben", "dia_id": "D1:4", "text": "I still teach maths at the school in Leeds."},
        ],
    },
    "qa": [
        {"question": "What is Ana's diet?", "answer": "vegetarian", "evidence": ["D1:1"], "category": 4},
        {"question": "Where does Ana live?", "answer": "Porto", "evidence": ["D1:3"], "category": 4},
        {"question": "What does Ben do?", "answer": "maths teacher", "evidence": ["D1:4"], "category": 4},
    ],
}


@cache
def locomo_samples() -> list[dict[str, Any]]:
    if not LOCOMO.exists():
        return [_STAND_IN]
    samples: list[dict[str, Any]] = json.loads(LOCOMO.read_text())
    return samples


def _session_time(text: str) -> datetime:
    try:
        return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return datetime(2023, 5, 8, tzinfo=UTC)


def locomo_thread(
    *, agent: Agent, sample: int = 0, user_id: str = "", external_id: str = "", sessions: int | None = None
) -> tuple[Thread, dict[str, Entry]]:
    """One conversation as a thread; returns it and its entries by LoCoMo turn id (D1:3 ...)."""
    data = locomo_samples()[sample % len(locomo_samples())]
    talk = data["conversation"]
    thread = thread_create(agent=agent, external_id=external_id or f"locomo-{data['sample_id']}", user_id=user_id)
    by_turn: dict[str, Entry] = {}
    number = 1
    while f"session_{number}" in talk and (sessions is None or number <= sessions):
        start = _session_time(talk.get(f"session_{number}_date_time", ""))
        turns = talk[f"session_{number}"]
        specs = [
            {
                "role": "user" if turn["speaker"] == talk["speaker_a"] else "assistant",
                "sender_name": turn["speaker"],
                "content": turn["text"],
                "created_at": start + timedelta(minutes=i),
            }
            for i, turn in enumerate(turns)
        ]
        for turn, entry in zip(turns, entries_add(thread=thread, entries=specs), strict=True):
            by_turn[turn["dia_id"]] = entry
        number += 1
    return thread, by_turn


def quote_of(text: str, words: int = 9) -> str:
    """The first words of a turn: a quote that holds in it word for word."""
    return " ".join(text.split()[:words])


def locomo_suggestions(
    *,
    agent: Agent,
    thread: Thread,
    by_turn: dict[str, Entry],
    sample: int = 0,
    limit: int = 40,
    user_id: str = "",
) -> list[MemoryItem]:
    """Suggested items from the conversation's single-hop questions whose evidence is in the thread."""
    data = locomo_samples()[sample % len(locomo_samples())]
    items: list[MemoryItem] = []
    for n, qa in enumerate(q for q in data["qa"] if q.get("category") == 4 and "answer" in q):
        if len(items) >= limit:
            break
        evidence = [by_turn[d.strip()] for d in qa["evidence"] if d.strip() in by_turn]
        if len(evidence) != 1:
            continue
        entry = evidence[0]
        question = str(qa["question"]).rstrip("?").strip()
        items.append(
            item_write(
                agent=agent,
                kind="fact",
                subject=entry.sender_name or "someone",
                attribute=question[:1].lower() + question[1:80],
                value=str(qa["answer"]),
                trust="model",
                user_id=user_id or thread.user_id,
                confidence=0.55 + (n % 4) * 0.1,
                evidence=[{"entry_id": entry.id, "quote": quote_of(entry.text)}],
            )
        )
    return items
