"""LongMemEval for `eval_retrieval --longmemeval FILE`: each question's haystack as a thread, scored by
the product's own search.

The file is LongMemEval's JSON (a list; `longmemeval_s`, `_m` or `_oracle`): each question has
`question_id`, `question_type`, `question`, `answer`, `question_date`, `haystack_session_ids`,
`haystack_dates` ("2023/05/20 (Sat) 02:21"), `haystack_sessions` (a list of sessions, each a list
of turns {role, content, has_answer?}) and `answer_session_ids`.

1. Index: every question gets a thread of its own (in one agent made for the run) holding its
   haystack, session after session in the file's order, each turn an entry dated from its
   session's date (30 s apart), its session id and whether it `has_answer` in its metadata;
   then everything is embedded by the configured embedder (the embedding job's service).
2. Ask: the question goes through `search(...)` (the selector POST /search uses), scoped to its
   thread, once per row of the table (a method, or a turn channel alone: `eval_retrieval`).
3. Score, per method, overall and per question type:
   - turn recall@k: the share of the question's evidence turns (`has_answer`) among the first k
     turns found (questions without evidence turns, such as the abstention ones, are left out);
   - session recall_all@k: 1 when every answer session is among the first k distinct sessions of
     the turns found (in the order of their best turn), else 0 (LongMemEval's turn-to-session
     scoring; questions without answer sessions are left out).
"""

from __future__ import annotations

import re
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memoryapp.models import Agent, Entry, Thread
from memoryapp.search.embedders import query_cache_clear
from memoryapp.search.indexing import embed_pending
from memoryapp.search.retrieval import search
from memoryapp.threads.services import entries_add, thread_create

_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]+\))?\s*(\d{1,2}):(\d{2})")
_THREAD_ID = re.compile(r"[^A-Za-z0-9_.~:@+-]")
# Turns asked for per question: enough distinct sessions for the largest k.
SESSION_DEPTH = 5


def haystack_date(text: Any) -> datetime | None:
    found = _DATE.match(str(text or ""))
    if not found:
        return None
    year, month, day, hour, minute = (int(g) for g in found.groups())
    try:
        return datetime(year, month, day, hour, minute, tzinfo=UTC)
    except ValueError:
        return None


def question_thread_id(question_id: Any, index: int) -> str:
    """A thread id from the question's id (the characters a thread id may hold), unique in the run."""
    cleaned = _THREAD_ID.sub("-", str(question_id or ""))[:100].strip(".") or "q"
    return f"lme-{index}-{cleaned}"


@dataclass
class Indexed:
    thread: Thread
    turn_ids: set[str]  # entries of evidence turns (has_answer)
    session_of: dict[str, str]  # entry id -> session id
    answer_sessions: set[str]


def index_question(agent: Agent, question: dict[str, Any], index: int) -> Indexed:
    """Step 1 for one question: its haystack as a thread of entries (the answer is not looked at)."""
    thread = thread_create(agent=agent, external_id=question_thread_id(question.get("question_id"), index))
    session_ids = list(question.get("haystack_session_ids") or [])
    dates = list(question.get("haystack_dates") or [])
    clock = datetime(2020, 1, 1, tzinfo=UTC)
    specs: list[dict[str, Any]] = []
    for number, session in enumerate(question.get("haystack_sessions") or []):
        session_id = str(session_ids[number]) if number < len(session_ids) else f"session-{number}"
        start = haystack_date(dates[number] if number < len(dates) else None) or clock
        clock = max(clock, start)
        for turn_number, turn in enumerate(session if isinstance(session, list) else []):
            if not isinstance(turn, dict):
                continue
            text = str(turn.get("content") or "").strip()
            if not text:
                continue
            clock += timedelta(seconds=30)
            specs.append(
                {
                    "role": "assistant" if turn.get("role") == "assistant" else "user",
                    "content": text,
                    "metadata": {
                        "session_id": session_id,
                        "turn": turn_number,
                        "has_answer": bool(turn.get("has_answer")),
                    },
                    "created_at": clock,
                }
            )
    for offset in range(0, len(specs), 500):
        entries_add(thread=thread, entries=specs[offset : offset + 500])
    turn_ids: set[str] = set()
    session_of: dict[str, str] = {}
    for entry_id, metadata in Entry.objects.filter(thread=thread).values_list("id", "metadata"):
        session_of[entry_id] = str((metadata or {}).get("session_id") or "")
        if (metadata or {}).get("has_answer"):
            turn_ids.add(entry_id)
    answers = {str(s) for s in question.get("answer_session_ids") or []}
    return Indexed(thread=thread, turn_ids=turn_ids, session_of=session_of, answer_sessions=answers)


def sessions_ranked(entry_ids: list[str], session_of: dict[str, str]) -> list[str]:
    """The sessions of ranked turns, each once, in the order of its best turn."""
    seen: dict[str, None] = {}
    for entry_id in entry_ids:
        session = session_of.get(entry_id)
        if session:
            seen.setdefault(session, None)
    return list(seen)


@dataclass
class Scores:
    turn: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    session: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    latency_ms: list[float] = field(default_factory=list)
    embed_ms: list[float] = field(default_factory=list)


def ask_question(
    *,
    agent: Agent,
    question: dict[str, Any],
    indexed: Indexed,
    run: dict[str, Any],
    ks: list[int],
    scores: list[Scores],
) -> None:
    """Steps 2 and 3 for one question and method; the figures go to every `Scores` given (overall, its type)."""
    query_cache_clear()  # each method pays for its own query embedding
    started = time.perf_counter()
    outcome = search(
        agent=agent,
        text=str(question.get("question") or ""),
        thread=indexed.thread,
        kinds=("entries",),
        limit=max(ks) * SESSION_DEPTH,
        # "Now" for the question is the day it was asked ("how many days ago ...").
        anchor=haystack_date(question.get("question_date")),
        **run,
    )
    elapsed = (time.perf_counter() - started) * 1000
    ranked = [hit.id for hit in outcome.hits]
    sessions = sessions_ranked(ranked, indexed.session_of)
    for score in scores:
        score.latency_ms.append(elapsed - outcome.embed_ms)
        score.embed_ms.append(outcome.embed_ms)
        for k in ks:
            if indexed.turn_ids:
                score.turn[k].append(len(indexed.turn_ids & set(ranked[:k])) / len(indexed.turn_ids))
            if indexed.answer_sessions:
                score.session[k].append(1.0 if indexed.answer_sessions <= set(sessions[:k]) else 0.0)


def percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))]


def summary_row(score: Scores, ks: list[int]) -> dict[str, float]:
    row: dict[str, float] = {}
    for k in ks:
        turn, session = score.turn.get(k) or [], score.session.get(k) or []
        row[f"turn_recall@{k}"] = round(100 * statistics.fmean(turn), 1) if turn else 0.0
        row[f"session_recall_all@{k}"] = round(100 * statistics.fmean(session), 1) if session else 0.0
    row["questions_turn"] = len(score.turn.get(ks[0]) or [])
    row["questions_session"] = len(score.session.get(ks[0]) or [])
    row["p50_ms"] = round(percentile(score.latency_ms, 0.5), 1)
    row["p95_ms"] = round(percentile(score.latency_ms, 0.95), 1)
    row["embed_p50_ms"] = round(percentile(score.embed_ms, 0.5), 1)
    return row


def longmemeval_run(
    *, agent: Agent, questions: list[dict[str, Any]], runs: dict[str, dict[str, Any]], ks: list[int], log: Any
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, dict[str, float]]]]:
    """Index and ask every question; (summary per row, summary per row and question type). `runs`:
    each row's name and search arguments (a method, or a channel alone)."""
    methods = list(runs)
    overall = {m: Scores() for m in methods}
    by_type: dict[str, dict[str, Scores]] = {m: defaultdict(Scores) for m in methods}
    for number, question in enumerate(questions, start=1):
        started = time.perf_counter()
        indexed = index_question(agent, question, number)
        embed_pending(agent_id=agent.pk)
        log(
            f"[{number}/{len(questions)}] {question.get('question_id')}: {len(indexed.session_of)} turns, "
            f"{len(indexed.turn_ids)} evidence turns, indexed in {time.perf_counter() - started:.1f}s"
        )
        kind = str(question.get("question_type") or "unknown")
        for method in methods:
            ask_question(
                agent=agent,
                question=question,
                indexed=indexed,
                run=runs[method],
                ks=ks,
                scores=[overall[method], by_type[method][kind]],
            )
    summary = {m: summary_row(overall[m], ks) for m in methods}
    per_type = {m: {kind: summary_row(s, ks) for kind, s in sorted(by_type[m].items())} for m in methods}
    return summary, per_type
