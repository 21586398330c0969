"""Writes while a person's erasure runs, as the tests of memoryapp.subjects.erasing set them up:
an erasure held running by another process, and an agent's `forget` of her with writes run by
other processes at a point between its batches (tests/forgetting/test_erasure_leftovers.py,
test_erasure_senders.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from django.db import connection

from governance.models import AuditRecord, DataKey, PseudonymKey
from memoryapp.forgetting.person import person_erase
from memoryapp.forgetting.services import cascade_step_hook
from memoryapp.models import (
    Entry,
    ErasureMark,
    MemoryFileVersion,
    MemoryItem,
    PersonIdentifier,
    SubjectMention,
    Thread,
)
from memoryapp.subjects.erasing import erasing_mark, erasure_running
from tests.forgetting.test_index_races import WAIT, Side
from tests.kit.api import Caller
from tests.kit.mentions import IDENTIFIERS, PERSON


def held_by_another_process(
    hold: Callable[[], AbstractContextManager[Any]],
) -> tuple[threading.Thread, threading.Event]:
    """Another process (a thread with a connection of its own) inside `hold()` until the event
    answered is set: what it takes there (locks, a transaction) is held meanwhile."""
    holding, release = threading.Event(), threading.Event()

    def run() -> None:
        try:
            with hold():
                holding.set()
                assert release.wait(WAIT)
        finally:
            connection.close()

    side = threading.Thread(target=run)
    side.start()
    assert holding.wait(WAIT)
    return side, release


@contextmanager
def _erasing(agent_id: int) -> Iterator[None]:
    with erasure_running(agent_id=agent_id, user_id=PERSON):
        erasing_mark(agent_id=agent_id, user_id=PERSON, keeps=())
        yield


def eraser_holding(agent_id: int) -> tuple[threading.Thread, threading.Event]:
    """Another process's erasure of her, marked and running until the event answered is set."""
    return held_by_another_process(lambda: _erasing(agent_id))


@contextmanager
def erasure_held(agent_id: int) -> Iterator[None]:
    """Inside the block, her erasure runs in another process (`eraser_holding`); it ends after."""
    side, release = eraser_holding(agent_id)
    try:
        yield
    finally:
        release.set()
        side.join(WAIT)


def writes_run(*writes: Callable[[], Any], what: str) -> list[Any]:
    """Each write run in another process (a Side: a connection of its own), one after the other,
    each to its end; their answers. Fails when one raised."""
    answers = []
    for write in writes:
        writer = Side(write, what)
        writer.join()
        assert not writer.errors, writer.errors
        answers.append(writer.answer)
    return answers


def erase_with_writes_between(
    caller: Caller,
    *writes: Callable[[], Any],
    when: Callable[[], bool],
    what: str,
    mode: str = "erase",
) -> list[Any]:
    """The agent's `forget` of her (`person_erase` in the caller's agent, run here to its end) with
    `writes` run (`writes_run`) at the first point between the erasure's batches (no transaction open) where `when()`
    holds. Answers the writes' answers; fails when no such point came or a write raised."""
    sent: list[Any] = []
    ran = False

    def between_steps(step: str) -> None:
        nonlocal ran
        if step != "batch" or ran or not when():
            return
        ran = True
        sent.extend(writes_run(*writes, what=what))

    cascade_step_hook(between_steps)
    try:
        person_erase(user_id=PERSON, agent_ids=[caller.agent.pk], mode=mode, actor="agent:alice")
    finally:
        cascade_step_hook(None)
    assert ran, "the hook never ran"
    return sent


def identifiers_register(caller: Caller) -> None:
    """Her identifiers (tests.kit.mentions), registered with the caller's agent."""
    answer = caller.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json")
    assert answer.status_code == 200, answer.content


def erasure_state(*, audit: bool = False) -> dict[str, Any]:
    """What an erasure changes: rows (with their text), marks, keys (and the audit trail's ids): equal
    before and after an erasure refused, or one that changed nothing."""
    state: dict[str, Any] = {
        "threads": sorted(Thread.objects.values_list("agent_id", "external_id", "user_id", "metadata")),
        "entries": sorted(Entry.objects.values_list("pk", "content")),
        "items": sorted(MemoryItem.objects.values_list("pk", "value", "status")),
        "files": sorted(MemoryFileVersion.objects.values_list("pk", "content")),
        "identifiers": PersonIdentifier.objects.count(),
        "mentions": SubjectMention.objects.count(),
        "marks": ErasureMark.objects.count(),
        "data_keys": sorted(DataKey.objects.values_list("pk", flat=True)),
        "pseudonym_keys": sorted(PseudonymKey.objects.values_list("pk", flat=True)),
    }
    if audit:
        state["audit"] = sorted(AuditRecord.objects.values_list("pk", flat=True))
    return state
