"""A legal hold placed while an erasure of its person begins (issue 25, memoryapp.subjects.erasing
step 6), on two connections with PostgreSQL's own advisory locks, interleaved by who waits on which
lock (`pg_locks`), never by sleeps; every wait bounded.

1. A hold committing while the agent's `forget` waits to read the holds (the hold's transaction
   holds her holds gate): the `forget` read the holds before taking its lock, found none, and
   erased under the hold. It reads them once it holds its lock, behind the gate, now: 409
   `legal_hold`, nothing changed. The same for the resume of a `forget` interrupted: skipped.
2. The same for a staff request, the hold on every agent: it read the holds (`_blocked`) before
   its lock and erased. Now `blocked`, naming the hold, nothing changed.
3. A hold placed while an erasure of its person runs (holds the lock): placed, the admin warns that
   the erasure started before it in that agent, named, and is not stopped by it, and the audit
   record lists the agent's id; the erasure goes on; the next one is refused.
   A hold placed while a staff request of every agent runs is told so for every agent it covers.
4. The locks balance: after a `forget` (done, refused by a hold, refused as running) and a staff
   request (done, blocked) the session holds no advisory lock; a staff request of every agent held
   her one person-wide lock from its start, and one agent's lock at a time (not one an agent: a
   service of thousands of agents would fill PostgreSQL's lock table).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from governance import locks
from governance.erasure.resume import erasure_resume
from governance.erasure.services import erasure_run
from governance.models import AuditRecord, ErasureRequest
from governance.retention.holds import legal_hold_place
from memoryapp.forgetting import person
from memoryapp.forgetting.person import person_erase
from memoryapp.forgetting.services import cascade_step_hook
from memoryapp.models import (
    Agent,
    ErasureMark,
    LegalHold,
    Thread,
)
from memoryapp.subjects.erasing import senders_erasing_refuse
from tests.forgetting.test_index_races import WAIT, Side
from tests.kit.admin import staff_client
from tests.kit.api import Caller, post_thread
from tests.kit.erasing import erasure_held, erasure_state, held_by_another_process, identifiers_register
from tests.kit.mentions import IDENTIFIERS, PERSON, plant

pytestmark = pytest.mark.django_db(transaction=True)  # two connections: what each commits is seen

REASON = "Litigation Valdomiro v. Travel Co"
HOLDS = "/admin/memoryapp/legalhold/"


def _forget(caller: Caller) -> Any:
    return caller.client.post(f"/api/v1/users/{PERSON}/forget", {"identifiers": IDENTIFIERS}, format="json")


def _advisory_locks() -> list[tuple[int, int, str]]:
    """The advisory locks this session holds (class, number, mode)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT classid::bigint, objid::bigint, mode FROM pg_locks"
            " WHERE locktype = 'advisory' AND pid = pg_backend_pid() ORDER BY 1, 2"
        )
        return [(int(c), int(o), str(m)) for c, o, m in cursor.fetchall()]


def _waits_for(side: Side, lock_class: int) -> bool:
    """Whether `side` waits (not granted) for an advisory lock of the class."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted AND locktype = 'advisory'"
            " AND classid = %s::oid)",
            [side.pid, lock_class],
        )
        return bool(cursor.fetchone()[0])


def _waits_for_holds_gate(side: Side) -> bool:
    """Whether `side` waits to read the holds behind a hold being placed (`locks.HOLDS_GATE`)."""
    return _waits_for(side, locks.HOLDS_GATE)


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.01)  # polling a condition, not deciding a race
    raise AssertionError(f"never: {what}")


@contextmanager
def _hold_in_flight(agent: Agent | None) -> Iterator[Side]:
    """A hold on her placed in a transaction of another connection, not yet committed (it holds her
    holds gate); committed when the block ends."""
    placed, commit = threading.Event(), threading.Event()

    def place() -> LegalHold:
        with transaction.atomic():
            hold = legal_hold_place(reason=REASON, placed_by="staff:pat", agent=agent, user_id=PERSON)
            placed.set()
            assert commit.wait(WAIT)
        return hold

    side = Side(place, "hold")
    assert placed.wait(WAIT)
    try:
        yield side
    finally:
        commit.set()
        side.join()
        assert not side.errors, side.errors


def test_a_hold_committed_while_the_forget_waits_for_its_lock_refuses_it(alice: Caller) -> None:
    identifiers_register(alice)
    plant(alice)
    before = erasure_state()
    audit_before = set(AuditRecord.objects.values_list("pk", flat=True))

    with _hold_in_flight(alice.agent) as placing:
        forget = Side(lambda: _forget(alice), "forget")
        # The forget holds its lock and waits to read the holds, behind the hold's transaction.
        _until(lambda: _waits_for_holds_gate(forget), "the forget waits for the hold's commit")
    forget.join()
    assert not forget.errors, forget.errors
    hold: LegalHold = placing.answer

    # Before: it had read the holds (none committed) and erased her under the hold, answering 200.
    answer = forget.answer
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["code"] == "legal_hold" and answer.json()["error"]["holds"] == [hold.pk]
    assert erasure_state() == before
    assert Thread.objects.filter(agent=alice.agent, external_id="t-ines", user_id=PERSON).exists()
    added = AuditRecord.objects.exclude(pk__in=audit_before)
    assert sorted(added.values_list("action", flat=True)) == ["legal_hold.placed", "person.erase.blocked"]
    # Placed before any erasure had her lock: nothing told to staff.
    assert added.get(action="legal_hold.placed").details["erasures_running"] == []


def test_a_hold_committed_while_a_staff_request_waits_for_its_locks_blocks_it(alice: Caller, bob: Caller) -> None:
    for caller in (alice, bob):
        identifiers_register(caller)
        plant(caller)
    request = ErasureRequest.objects.create(user_id=PERSON, agent_ids=[], mode=ErasureRequest.Mode.ERASE)
    before = erasure_state()

    with _hold_in_flight(None) as placing:  # on her in every agent
        run = Side(lambda: erasure_run(request_id=request.pk), "staff erasure")
        # Past the point where `_blocked` read the holds before: holding its lock, waiting to read them.
        _until(lambda: _waits_for_holds_gate(run), "the request waits for the hold's commit")
        request.refresh_from_db()
        assert request.status == ErasureRequest.Status.RUNNING and request.phase == "holds"
    run.join()
    assert not run.errors, run.errors
    hold: LegalHold = placing.answer

    # Before: status done, her threads in both agents gone under the hold.
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.BLOCKED, request.error
    assert request.blocked_by == [hold.pk] and run.answer == {"blocked_by": [hold.pk]}
    after = erasure_state()
    # (The hold's audit record on every agent may make her a pseudonym key of no agent: none went.)
    assert set(before.pop("pseudonym_keys")) <= set(after.pop("pseudonym_keys"))
    assert after == before
    assert Thread.objects.filter(user_id=PERSON).count() == 2
    assert AuditRecord.objects.filter(action="erasure.blocked", details__request=request.pk).exists()
    assert AuditRecord.objects.get(action="legal_hold.placed").details["erasures_running"] == []


def _paused(erase: Callable[[], Any], what: str) -> tuple[Side, threading.Event]:
    """An erasure of her in another connection, stopped between two of its batches (its lock held,
    part of her memory erased) until the event answered is set (then `cascade_step_hook(None)`)."""
    paused, go = threading.Event(), threading.Event()

    def between_batches(step: str) -> None:
        if step == "batch" and not paused.is_set():
            paused.set()
            assert go.wait(WAIT)

    cascade_step_hook(between_batches)
    side = Side(erase, what)
    assert paused.wait(WAIT)
    return side, go


def _paused_forget(caller: Caller) -> tuple[Side, threading.Event]:
    return _paused(lambda: _forget(caller), "forget")


@pytest.mark.parametrize("on", ["her in alice", "her in every agent"])
def test_a_hold_placed_while_her_erasure_runs_is_placed_and_staff_are_told_it_does_not_stop_it(
    alice: Caller, bob: Caller, on: str
) -> None:
    for caller in (alice, bob):
        identifiers_register(caller)
        plant(caller)
    officer = staff_client(username="pia", groups=("Privacy officers",))
    forget, go = _paused_forget(alice)
    try:
        form = {"agent": alice.agent.pk if on == "her in alice" else "", "user_id": PERSON, "reason": REASON}
        answer = officer.post(f"{HOLDS}add/", form, follow=True)
    finally:
        go.set()
        forget.join()
        cascade_step_hook(None)
    assert not forget.errors, forget.errors

    assert answer.status_code == 200, answer.content.decode()[:2000]
    hold = LegalHold.objects.get()
    assert hold.user_id == PERSON and hold.lifted_at is None
    shown = [(m.level_tag, str(m)) for m in answer.context["messages"]]
    warnings = [text for level, text in shown if level == "warning"]
    # Before: placed with no word, though the erasure under way was not stopped by it.
    assert len(warnings) == 1, shown
    assert f"Hold #{hold.pk} is placed" in warnings[0] and "agent alice:" in warnings[0]
    assert "started before the hold" in warnings[0] and "does not stop it" in warnings[0]
    assert "bob" not in warnings[0] and PERSON not in warnings[0]
    placed = AuditRecord.objects.get(action="legal_hold.placed")
    assert placed.details["erasures_running"] == [alice.agent.pk]
    assert PERSON not in str(placed.details) + placed.subject and "Litigation" not in str(placed.details)

    # The erasure that started before it went on to its end (the hold is no stop to it) ...
    assert forget.answer.status_code == 200, forget.answer.content
    assert not Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    # ... and the next one reads it; bob's memory of her, under an every-agent hold, stays.
    assert _forget(alice).json()["error"]["code"] == "legal_hold"
    if on == "her in every agent":
        assert _forget(bob).json()["error"]["code"] == "legal_hold"
    assert Thread.objects.filter(agent=bob.agent, user_id=PERSON).exists()


def test_a_hold_placed_with_no_erasure_running_takes_the_lock_and_tells_nothing(alice: Caller) -> None:
    plant(alice)
    officer = staff_client(username="pia", groups=("Privacy officers",))

    answer = officer.post(f"{HOLDS}add/", {"agent": alice.agent.pk, "user_id": PERSON, "reason": REASON}, follow=True)

    assert answer.status_code == 200
    assert not [m for m in answer.context["messages"] if m.level_tag == "warning"]
    assert AuditRecord.objects.get(action="legal_hold.placed").details["erasures_running"] == []
    assert _advisory_locks() == []  # the shared lock went with the hold's transaction


def _person_number(agent: Agent) -> int:
    return locks.person(agent.pk, PERSON)


def test_the_erasures_let_go_of_every_lock_they_took(alice: Caller, bob: Caller) -> None:
    for caller in (alice, bob):
        identifiers_register(caller)
        plant(caller)
    # A staff request of every agent holds her person-wide lock from its start, one agent's at a time.
    held_mid_run: list[list[tuple[int, int, str]]] = []

    def between_batches(step: str) -> None:
        if step == "batch" and not held_mid_run:
            held_mid_run.append(_advisory_locks())

    request = ErasureRequest.objects.create(user_id=PERSON, agent_ids=[], mode=ErasureRequest.Mode.ERASE)
    cascade_step_hook(between_batches)
    try:
        erasure_run(request_id=request.pk)
    finally:
        cascade_step_hook(None)
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    mid_run = held_mid_run[0]
    assert (locks.ERASURE_PERSON, locks.person_anywhere(PERSON), "ExclusiveLock") in mid_run
    agents_held = [number for lock_class, number, _ in mid_run if lock_class == locks.ERASURE_RUN]
    assert agents_held in ([_person_number(alice.agent)], [_person_number(bob.agent)]), mid_run
    assert _advisory_locks() == []

    # A forget done, then one refused by a hold: nothing left held either.
    post_thread(alice, "t-ines-2", user_id=PERSON)
    assert _forget(alice).json()["counts"]["threads"] == 1
    assert _advisory_locks() == []
    post_thread(alice, "t-ines-3", user_id=PERSON)
    legal_hold_place(reason=REASON, placed_by="staff:pat", agent=alice.agent, user_id=PERSON)
    assert _forget(alice).json()["error"]["code"] == "legal_hold"
    assert _advisory_locks() == []
    # A staff request blocked by it.
    blocked = ErasureRequest.objects.create(user_id=PERSON, agent_ids=[alice.agent.pk], mode="erase")
    erasure_run(request_id=blocked.pk)
    blocked.refresh_from_db()
    assert blocked.status == ErasureRequest.Status.BLOCKED
    assert _advisory_locks() == []
    # A forget in bob refused because another process erases her there.
    with erasure_held(bob.agent.pk):
        assert _forget(bob).json()["error"]["code"] == "erasure_running"
        assert _advisory_locks() == []


def test_a_hold_committed_while_the_resume_waits_to_read_the_holds_skips_it(
    alice: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    identifiers_register(alice)
    plant(alice)

    def killed(**_: Any) -> int:
        raise RuntimeError("killed")

    # Her forget stopped half-way (after her rows went, before her identifiers did): the mark stays.
    monkeypatch.setattr(person, "identifiers_delete", killed)
    with pytest.raises(RuntimeError):
        person_erase(user_id=PERSON, agent_ids=[alice.agent.pk], mode="erase", actor="agent:alice")
    monkeypatch.undo()
    mark = ErasureMark.objects.get(agent=alice.agent, user_id=PERSON)
    before = erasure_state()

    with _hold_in_flight(alice.agent) as placing:
        resumed = Side(lambda: erasure_resume(mark_id=mark.pk), "resume")
        _until(lambda: _waits_for_holds_gate(resumed), "the resume waits for the hold's commit")
    resumed.join()
    assert not resumed.errors, resumed.errors
    hold: LegalHold = placing.answer
    # Before: it read the holds before its lock, none seen, and erased the rest of her under the hold.
    assert resumed.answer == {"skipped": "legal holds", "holds": [hold.pk]}
    assert erasure_state() == before


def test_a_hold_placed_while_a_staff_request_of_every_agent_runs_is_told_for_each_agent(
    alice: Caller, bob: Caller
) -> None:
    for caller in (alice, bob):
        identifiers_register(caller)
        plant(caller)
    request = ErasureRequest.objects.create(user_id=PERSON, agent_ids=[], mode=ErasureRequest.Mode.ERASE)
    run, go = _paused(lambda: erasure_run(request_id=request.pk), "staff erasure")
    try:
        # In one agent, the request's lock there; in the other, not reached yet: its person-wide lock.
        for agent in (alice.agent, bob.agent):
            legal_hold_place(reason=REASON, placed_by="staff:pat", agent=agent, user_id=PERSON)
        every = legal_hold_place(reason=REASON, placed_by="staff:pat", agent=None, user_id=PERSON)
    finally:
        go.set()
        run.join()
        cascade_step_hook(None)
    assert not run.errors, run.errors

    told = {
        record.details["hold_id"]: record.details["erasures_running"]
        for record in AuditRecord.objects.filter(action="legal_hold.placed")
    }
    assert sorted(told.values()) == [[alice.agent.pk], [alice.agent.pk, bob.agent.pk], [bob.agent.pk]]
    assert told[every.pk] == [alice.agent.pk, bob.agent.pk]
    # Begun before the holds, it went on to its end; the next erasure reads them.
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    assert _forget(alice).json()["error"]["code"] == "legal_hold"
    assert _advisory_locks() == []


def test_a_hold_committed_while_a_staff_request_waits_for_its_erasure_lock_blocks_it(alice: Caller) -> None:
    # Found in review: every test above holds the gate before the erasure starts, so reading the
    # holds before the erasure's own lock (behind the gate) passed them all. Here the request waits
    # for its lock, held by another erasure of her, while a hold commits: it must read that hold.
    plant(alice)
    request = ErasureRequest.objects.create(user_id=PERSON, agent_ids=[alice.agent.pk], mode="erase")
    with erasure_held(alice.agent.pk):
        run = Side(lambda: erasure_run(request_id=request.pk), "staff erasure")
        _until(lambda: _waits_for(run, locks.ERASURE_RUN), "the request waits for its lock")
        hold = legal_hold_place(reason=REASON, placed_by="staff:pat", agent=alice.agent, user_id=PERSON)
    run.join()
    assert not run.errors, run.errors
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.BLOCKED and request.blocked_by == [hold.pk]
    assert Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()


def test_a_write_of_her_memory_in_flight_is_no_erasure_running(alice: Caller) -> None:
    # Found in review: a write of her message holds her eraser lock shared to its commit; a hold
    # placed meanwhile was told an erasure ran.
    plant(alice)

    @contextmanager
    def writing() -> Iterator[None]:
        with transaction.atomic():
            senders_erasing_refuse(agent_id=alice.agent.pk, senders={PERSON: "user_id"})
            yield

    side, release = held_by_another_process(writing)
    try:
        hold = legal_hold_place(reason=REASON, placed_by="staff:pat", agent=alice.agent, user_id=PERSON)
    finally:
        release.set()
        side.join()
    assert list(hold.erasures_running) == []


def test_an_eraser_lock_in_another_database_of_the_server_is_no_erasure_here(alice: Caller) -> None:
    # Advisory locks are a database's own: the same key held in another database of the server (a
    # staging copy, with the same agent ids) is no erasure of her here.
    plant(alice)
    params = connection.get_connection_params()
    kept = {k: v for k, v in params.items() if k in ("host", "port", "user", "password")}
    with psycopg.connect(**kept, dbname="postgres", autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [locks.ERASURE_RUN, locks.person(alice.agent.pk, PERSON)])
        hold = legal_hold_place(reason=REASON, placed_by="staff:pat", agent=alice.agent, user_id=PERSON)
    assert list(hold.erasures_running) == []
