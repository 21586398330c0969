"""Busy threads (002 `onBusy`): a run started on a thread holds it; a second run waits, is
rejected or interrupts the first, as the thread or its agent says. The two runs come from two
gunicorn processes on the tests' database, so nothing in one process's memory can make it hold."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from governance.models import AuditRecord
from memoryapp.models import Agent, Entry, ThreadRun
from tests.kit.api import Caller, answered, error_of, patch_ok, post_ok, post_thread
from tests.kit.servers import gunicorn_serving

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def servers(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Two web processes of the service: one run is started through each."""
    with (
        gunicorn_serving(var_dir=tmp_path_factory.mktemp("busy-one")) as one,
        gunicorn_serving(var_dir=tmp_path_factory.mktemp("busy-two")) as two,
    ):
        yield one, two


@dataclass
class Answer:
    status: int
    body: Any
    seconds: float


def call(
    where: str, method: str, path: str, key: str, body: Any = None, headers: dict[str, str] | None = None
) -> Answer:
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    began = time.monotonic()
    try:
        sent = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=sent)
        response = conn.getresponse()
        raw = response.read()
        return Answer(response.status, json.loads(raw) if raw else None, time.monotonic() - began)
    finally:
        conn.close()


def start(where: str, caller: Caller, thread_id: str = "t-1") -> Answer:
    return call(where, "POST", f"/api/v1/threads/{thread_id}/runs", caller.key)


def in_background(work: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(work()))
    worker.start()
    return worker, out


def set_policy(caller: Caller, thread_id: str, **policy: Any) -> None:
    post_thread(caller, thread_id)
    patch_ok(caller.client, f"/api/v1/threads/{thread_id}", policy)


@pytest.mark.django_db(transaction=True)
def test_wait_mode_second_run_starts_when_the_first_finishes(servers: tuple[str, str], alice: Caller) -> None:
    one, two = servers
    set_policy(alice, "t-1", on_busy="wait", busy_timeout_seconds=30)
    first = start(one, alice)
    assert first.status == 201, first.body
    worker, out = in_background(lambda: start(two, alice))
    time.sleep(1.0)
    assert worker.is_alive(), "the second run did not wait for the first"
    finished = call(one, "POST", f"/api/v1/threads/t-1/runs/{first.body['id']}/finish", alice.key)
    assert finished.status == 200 and finished.body["status"] == "finished"
    worker.join(30)
    second = out[0]
    assert second.status == 201, second.body
    assert second.seconds >= 0.9
    assert second.body["id"] != first.body["id"] and second.body["on_busy"] == "wait"
    assert list(ThreadRun.objects.order_by("started_at").values_list("status", flat=True)) == ["finished", "running"]


@pytest.mark.django_db(transaction=True)
def test_wait_mode_gives_up_after_the_busy_timeout(servers: tuple[str, str], alice: Caller) -> None:
    one, two = servers
    set_policy(alice, "t-1", on_busy="wait", busy_timeout_seconds=30)
    first = start(one, alice)
    # A shorter timeout for the waiter's thread, set after the first run took its 30 s lease.
    patch_ok(alice.client, "/api/v1/threads/t-1", {"busy_timeout_seconds": 1})
    second = start(two, alice)
    assert second.status == 409 and second.body["error"]["code"] == "thread_busy"
    assert first.body["id"] in second.body["error"]["message"] and "waited" in second.body["error"]["message"]
    assert second.seconds >= 0.9
    assert ThreadRun.objects.get().id == first.body["id"]


@pytest.mark.django_db(transaction=True)
def test_reject_mode_answers_409_naming_the_running_run(servers: tuple[str, str], alice: Caller) -> None:
    one, two = servers
    set_policy(alice, "t-1", on_busy="reject")
    first = start(one, alice)
    second = start(two, alice)
    assert second.status == 409 and second.body["error"]["code"] == "thread_busy"
    assert first.body["id"] in second.body["error"]["message"]
    assert second.seconds < 5
    # The first run still writes; once it finishes, a new run starts through the other process.
    headers = {"X-Run-Id": first.body["id"]}
    wrote = call(one, "POST", "/api/v1/threads/t-1/entries", alice.key, {"role": "user", "content": "hi"}, headers)
    assert wrote.status == 201, wrote.body
    call(one, "POST", f"/api/v1/threads/t-1/runs/{first.body['id']}/finish", alice.key)
    assert start(two, alice).status == 201


@pytest.mark.django_db(transaction=True)
def test_interrupt_mode_ends_the_running_run_which_sees_it_on_its_next_write(
    servers: tuple[str, str], alice: Caller
) -> None:
    one, two = servers
    set_policy(alice, "t-1", on_busy="interrupt")
    first = start(one, alice)
    headers = {"X-Run-Id": first.body["id"]}
    body = {"role": "user", "content": "before"}
    assert call(one, "POST", "/api/v1/threads/t-1/entries", alice.key, body, headers).status == 201
    second = start(two, alice)
    assert second.status == 201, second.body
    late = call(one, "POST", "/api/v1/threads/t-1/entries", alice.key, {"role": "user", "content": "late"}, headers)
    assert late.status == 409 and late.body["error"]["code"] == "run_ended"
    assert second.body["id"] in late.body["error"]["message"]
    assert list(Entry.objects.values_list("text", flat=True)) == ["before"]
    ended = call(one, "GET", f"/api/v1/threads/t-1/runs/{first.body['id']}", alice.key)
    assert (ended.body["status"], ended.body["ended_by"]) == ("interrupted", second.body["id"])
    # Its finish answers the same: the client learns the run did not finish as itself.
    assert call(one, "POST", f"/api/v1/threads/t-1/runs/{first.body['id']}/finish", alice.key).status == 409
    # The new run writes.
    new_headers = {"X-Run-Id": second.body["id"]}
    assert call(two, "POST", "/api/v1/threads/t-1/entries", alice.key, body, new_headers).status == 201
    outcomes = list(AuditRecord.objects.filter(action="thread.run").values_list("outcome", flat=True))
    assert outcomes == ["started", "interrupted", "started"]


@pytest.mark.django_db(transaction=True)
def test_a_run_abandoned_by_its_client_is_released_after_its_timeout(servers: tuple[str, str], alice: Caller) -> None:
    one, two = servers
    set_policy(alice, "t-1", on_busy="reject", busy_timeout_seconds=1)
    crashed = start(one, alice)
    assert start(two, alice).status == 409
    time.sleep(1.2)
    taken = start(two, alice)
    assert taken.status == 201, taken.body
    assert ThreadRun.objects.get(pk=crashed.body["id"]).status == "expired"
    headers = {"X-Run-Id": crashed.body["id"]}
    late = call(one, "POST", "/api/v1/threads/t-1/entries", alice.key, {"role": "user", "content": "x"}, headers)
    assert (
        late.status == 409 and late.body["error"]["code"] == "run_ended" and "expired" in late.body["error"]["message"]
    )


@pytest.mark.django_db(transaction=True)
def test_writes_with_a_run_move_its_lease_on(servers: tuple[str, str], alice: Caller) -> None:
    one, two = servers
    set_policy(alice, "t-1", on_busy="reject", busy_timeout_seconds=2)
    run = start(one, alice)
    headers = {"X-Run-Id": run.body["id"]}
    for turn in range(3):
        time.sleep(0.8)
        body = {"role": "user", "content": f"turn {turn}"}
        assert call(one, "POST", "/api/v1/threads/t-1/entries", alice.key, body, headers).status == 201
    # 2.4 s after the start, still held: each write renewed the 2 s lease.
    assert start(two, alice).status == 409


def test_the_agent_setting_applies_where_the_thread_has_none(alice: Caller) -> None:
    Agent.objects.filter(pk=alice.agent.pk).update(on_busy="reject")
    post_thread(alice, "t-1")
    first = post_ok(alice.client, "/api/v1/threads/t-1/runs")
    assert first["on_busy"] == "reject" and first["busy_timeout_seconds"] == 60
    assert error_of(alice.client.post("/api/v1/threads/t-1/runs"), 409)["code"] == "thread_busy"
    patch_ok(alice.client, "/api/v1/threads/t-1", {"on_busy": "interrupt"})
    second = post_ok(alice.client, "/api/v1/threads/t-1/runs")
    assert second["on_busy"] == "interrupt"
    assert ThreadRun.objects.get(pk=first["id"]).status == "interrupted"


def test_bad_busy_settings_and_unknown_runs_are_refused(alice: Caller) -> None:
    post_thread(alice, "t-1")
    assert (
        error_of(alice.client.patch("/api/v1/threads/t-1", {"on_busy": "later"}, format="json"))["field"] == "on_busy"
    )
    bad_timeout = alice.client.patch("/api/v1/threads/t-1", {"busy_timeout_seconds": -1}, format="json")
    assert error_of(bad_timeout)["field"] == "busy_timeout_seconds"
    unknown = alice.client.post(
        "/api/v1/threads/t-1/entries", {"role": "user", "content": "x"}, format="json", HTTP_X_RUN_ID="run_nope"
    )
    assert error_of(unknown, 404)["code"] == "not_found"
    assert not Entry.objects.exists()
    assert error_of(alice.client.post("/api/v1/threads/t-1/runs", {"mode": "x"}, format="json"))["field"] == "mode"
    assert error_of(alice.client.post("/api/v1/threads/t-1/runs/run_nope/finish"), 404)["code"] == "not_found"


def test_another_agents_runs_are_not_found(alice: Caller, mallory: Caller) -> None:
    post_thread(alice, "t-1")
    run = post_ok(alice.client, "/api/v1/threads/t-1/runs")
    post_thread(mallory, "t-1")
    for answer in (
        mallory.client.get(f"/api/v1/threads/t-1/runs/{run['id']}"),
        mallory.client.post(f"/api/v1/threads/t-1/runs/{run['id']}/finish"),
        mallory.client.post(
            "/api/v1/threads/t-1/entries", {"role": "user", "content": "x"}, format="json", HTTP_X_RUN_ID=run["id"]
        ),
    ):
        assert error_of(answer, 404)["code"] == "not_found"
    # Mallory's own thread t-1 is another thread: her run starts at once, alice's stays running.
    assert post_ok(mallory.client, "/api/v1/threads/t-1/runs")["status"] == "running"
    assert answered(alice.client.get(f"/api/v1/threads/t-1/runs/{run['id']}"), 200)["status"] == "running"


def test_a_run_header_that_names_no_run_is_a_400_naming_it(alice: Caller) -> None:
    post_thread(alice, "t-1")
    for bad in ("", "run x", "r" * 41, "run\x01"):
        answer = alice.client.post(
            "/api/v1/threads/t-1/entries", {"role": "user", "content": "x"}, format="json", HTTP_X_RUN_ID=bad
        )
        assert error_of(answer)["field"] == "X-Run-Id", bad
    assert not Entry.objects.exists()


def test_changing_only_the_busy_policy_leaves_updated_at(alice: Caller) -> None:
    before = post_thread(alice, "t-1")["updated_at"]
    after = patch_ok(alice.client, "/api/v1/threads/t-1", {"on_busy": "reject", "busy_timeout_seconds": 5})
    assert (after["updated_at"], after["on_busy"], after["busy_timeout_seconds"]) == (before, "reject", 5)
    cleared = patch_ok(alice.client, "/api/v1/threads/t-1", {"on_busy": "", "busy_timeout_seconds": 0})
    assert "on_busy" not in cleared and "busy_timeout_seconds" not in cleared
