"""What an erasure of a person left behind, and how it meets a second one (issue 25, leftovers):
each test fails without the fix it names. The interleavings reuse test_index_races' sides."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from memoryapp.forgetting.services import cascade_step_hook
from memoryapp.subjects.erasing import erasing_mark, erasure_running
from tests.forgetting.test_index_races import WAIT
from tests.kit.api import Caller, post_entry, post_thread
from tests.kit.mentions import PERSON

pytestmark = pytest.mark.django_db(transaction=True)  # the erasure and the writer on two connections


@pytest.fixture(autouse=True)
def _no_hook() -> Any:
    yield
    cascade_step_hook(None)


def _eraser_holding(agent_id: int) -> tuple[threading.Thread, threading.Event]:
    """Another process's erasure of her, marked and running until the event answered is set."""
    holding, release = threading.Event(), threading.Event()

    def eraser() -> None:
        try:
            with erasure_running(agent_id=agent_id, user_id=PERSON):
                erasing_mark(agent_id=agent_id, user_id=PERSON, keeps=())
                holding.set()
                assert release.wait(WAIT)
        finally:
            connection.close()

    side = threading.Thread(target=eraser)
    side.start()
    assert holding.wait(WAIT)
    return side, release


def test_a_second_forget_while_one_runs_answers_409_at_once_and_erases_nothing(alice: Caller) -> None:
    post_thread(alice, "t-ines", user_id=PERSON)
    post_entry(alice, "t-ines", role="user", content="I booked the flights myself.")
    side, release = _eraser_holding(alice.agent.pk)
    try:
        with connection.cursor() as cursor:
            # A bound on any wait of this connection: the forget waiting on the first erasure's lock
            # fails here instead of hanging the test (and, in the service, a web worker).
            cursor.execute("SET lock_timeout = '10s'")
        answer = alice.client.post(f"/api/v1/users/{PERSON}/forget", {}, format="json")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")
        release.set()
        side.join(WAIT)
    # Before: the request waited on the running erasure's lock with no bound.
    assert answer.status_code == 409, answer.content
    error = answer.json()["error"]
    assert error["code"] == "erasure_running" and error["field"] == "user_id"
    assert "already being erased" in error["message"]
    assert post_entry(alice, "t-ines", role="user", content="Still here.")["content"] == "Still here."
    # Once the first ended, the same call runs.
    done = alice.client.post(f"/api/v1/users/{PERSON}/forget", {}, format="json")
    assert done.status_code == 200, done.content
    assert done.json()["counts"]["threads"] == 1
