"""Automatic compaction triggered once under concurrent appends (issue 16, item 5).

Appends race on one thread from two processes at once: a gunicorn server (its own process, four
request threads) taking them over HTTP, and threads of the test process calling the threads'
service, each with a database connection of its own. Every append commits and checks the trigger;
the crossing must send exactly one compaction job, which then compacts once (the zero-model tier:
clearing the older tool results, as the web process here has no model).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from governance.jobs.broker import job_debounce_clear
from governance.models import JobRun
from memory_project.celery import app
from memoryapp.compaction.auto import AUTO_JOB_TASK, agent_compaction_settings_set, auto_compaction_key
from memoryapp.compaction.history import compacted_history
from memoryapp.compaction.policy import history_tokens, thread_branch
from memoryapp.models import Entry, Thread
from memoryapp.tasks.compaction import auto_compact_thread
from memoryapp.threads.services import thread_append
from tests.kit.api import Caller, post_thread
from tests.kit.concurrency import in_threads
from tests.kit.servers import gunicorn_serving

WORDS = "the quick brown fox jumps over the lazy dog " * 20  # about 229 tokens a message
APPENDERS = 4  # in each process
APPENDS = 4  # by each appender


@pytest.fixture
def gunicorn(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    # Its jobs go to the broker for real (nothing here consumes queue `extraction`): they stay queued.
    with gunicorn_serving(var_dir=tmp_path, threads=APPENDERS, env={"CELERY_TASK_ALWAYS_EAGER": "0"}) as where:
        yield where


def _tool_round(call_id: str) -> list[dict[str, Any]]:
    """A tool call and its result (about 235 tokens): what clearing, the strategy here, reclaims."""
    return [
        {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "name": "fetch", "arguments": {}}]},
        {"type": "tool_result", "tool_call_id": call_id, "content": WORDS},
    ]


def _http_append(where: str, key: str, thread_id: str, call_id: str) -> int:
    request = urllib.request.Request(
        f"http://{where}/api/v1/threads/{thread_id}/entries",
        data=json.dumps({"entries": _tool_round(call_id)}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return int(response.status)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_automatic_compaction_is_triggered_once_under_concurrent_appends(gunicorn: str, alice: Caller) -> None:
    agent_compaction_settings_set(
        agent=alice.agent,
        # The zero-model tier: the web process here has no model to summarize with.
        values={"enabled": True, "context_window": 4000, "trigger_ratio": 0.5, "strategy": "clear-old-tool-results"},
        actor="test",
    )
    post_thread(alice, "t-race")
    thread = Thread.objects.get(agent=alice.agent, external_id="t-race")
    job_debounce_clear(auto_compaction_key(thread.pk))

    def over_http(n: int) -> list[int]:
        return [_http_append(gunicorn, alice.key, "t-race", f"http-{n}-{i}") for i in range(APPENDS)]

    def in_process(n: int) -> int:
        for i in range(APPENDS):
            thread_append(agent=alice.agent, external_id="t-race", entries=_tool_round(f"local-{n}-{i}"))
        return APPENDS

    app.conf.task_always_eager = False
    try:
        outcomes = in_threads(
            *(lambda n=n: over_http(n) for n in range(APPENDERS)),
            *(lambda n=n: in_process(n) for n in range(APPENDERS)),
            timeout=300,
        )
    finally:
        app.conf.task_always_eager = True
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert outcomes[:APPENDERS] == [[201] * APPENDS] * APPENDERS

    thread.refresh_from_db()
    appended = 2 * APPENDERS * APPENDS
    assert Entry.objects.filter(thread=thread, type="tool_result").count() == appended
    exact = history_tokens(compacted_history(thread_branch(thread)))
    assert exact > 2 * 2000  # crossed the trigger (2,000) early in the burst, and went on past it
    assert thread.history_tokens == exact  # the running count lost no append

    runs = list(JobRun.objects.filter(task_name=AUTO_JOB_TASK))
    assert len(runs) == 1, [(r.status, r.arguments) for r in runs]
    [run] = runs
    assert run.status == "queued" and run.dedupe_key == f"autocompact:{thread.pk}"
    assert run.arguments["thread_pk"] == thread.pk and run.arguments["tokens"] >= 2000

    auto_compact_thread(run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded" and run.result["compacted"] is True, (run.status, run.result, run.error)
    assert run.result["cleared"] == appended - 3  # the newest three results stay
    [compaction] = Entry.objects.filter(thread=thread, type="compaction")
    assert compaction.event["source"] == "auto-trigger"

    # Under the trigger now: another append (checked after its commit, for real) sends nothing.
    thread_append(agent=alice.agent, external_id="t-race", entries=[{"role": "user", "content": "Thanks."}])
    assert JobRun.objects.filter(task_name=AUTO_JOB_TASK).count() == 1
