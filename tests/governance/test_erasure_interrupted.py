"""An erasure interrupted between marking the person and finishing (governance.erasure.resume):
staff see the person marked, interrupted or in progress, on the people page, the person's page
and the request's page; an agent's `forget` left so is finished by the resume sweep, a staff
request by running it again; either way the mark goes and writes naming her are stored as written
(she is no longer registered) instead of being redacted for ever."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from governance.erasure import resume
from governance.erasure.resume import RESUME_KIND, erasures_resume
from governance.erasure.services import erasure_request_file, erasure_request_retry
from governance.models import ErasureRequest, JobRun
from memoryapp.forgetting import person
from memoryapp.forgetting.person import person_erase
from memoryapp.models import Entry, ErasureMark, PersonIdentifier, Thread
from memoryapp.subjects.erasing import erasure_running, erasures_marked
from memoryapp.subjects.matching import PLACEHOLDER
from tests.kit.admin import staff_client
from tests.kit.api import Caller, post_entry, post_thread
from tests.kit.mentions import EMAIL, IDENTIFIERS, NAME, PERSON, plant

pytestmark = pytest.mark.django_db(transaction=True)  # the mark and the eraser's lock are committed


class Killed(Exception):
    """The process running the erasure dies here (its session lock goes with its connection)."""


def _register(caller: Caller) -> None:
    answer = caller.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json")
    assert answer.status_code == 200, answer.content


def _killed_after_the_mentions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The erasure stops after the mentions were done, before the registry rows (and the mark) go."""

    def killed(**_: Any) -> int:
        raise Killed

    monkeypatch.setattr(person, "identifiers_delete", killed)


def _marked(agent_id: int) -> bool:
    return ErasureMark.objects.filter(agent_id=agent_id, user_id=PERSON).exists()


def _officer() -> Any:
    return staff_client(permissions=["view_erasurerequest", "view_thread"])


def test_an_agents_forget_interrupted_is_shown_and_finished_by_the_resume_sweep(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    _register(alice)
    plant(alice)
    _killed_after_the_mentions(monkeypatch)
    with pytest.raises(Killed):
        person_erase(user_id=PERSON, agent_ids=[alice.agent.pk], mode="redact", actor="agent:alice")
    monkeypatch.undo()
    assert _marked(alice.agent.pk)
    # Meanwhile, a write naming her is redacted: the reason must be visible to staff.
    post_thread(alice, "t-eve", user_id="u-eve")
    assert post_entry(alice, "t-eve", role="user", content=f"Ask {NAME}.")["content"] == f"Ask {PLACEHOLDER}."

    # Before: no page named her as being erased.
    page = _officer().get("/admin/person/").content.decode()
    assert "erasing-interrupted" in page and PERSON in page and "finish erasures interrupted" in page
    own = _officer().get(f"/admin/person/?id={PERSON}").content.decode()
    assert 'class="erasing-interrupted" data-agent="alice"' in own and "(redact)" in own

    # Before: nothing ran it again; the mark stayed for ever.
    with django_capture_on_commit_callbacks(execute=True):
        counts = erasures_resume()
    assert counts["resumed"] == 1
    run = JobRun.objects.get(kind=RESUME_KIND)
    assert run.status == JobRun.Status.SUCCEEDED, run.error
    assert PERSON not in str(run.arguments) and PERSON not in str(run.result)
    assert not _marked(alice.agent.pk) and erasures_marked() == []
    # In the mode it was asked in: her thread stays, redacted.
    assert Thread.objects.filter(agent=alice.agent, external_id="t-ines").exists()
    # She is registered no more: a write naming her is stored as written, and the sweep has nothing to do.
    assert post_entry(alice, "t-eve", role="user", content=f"Ask {NAME}.")["content"] == f"Ask {NAME}."
    assert erasures_resume() == {"running": 0, "requests": 0, "held": 0, "tried": 0, "resumed": 0}
    assert "erasing-list" not in _officer().get("/admin/person/").content.decode()


def test_an_erasure_running_is_shown_in_progress_and_left_alone_by_the_sweep(alice: Caller) -> None:
    _register(alice)
    from memoryapp.subjects.erasing import erasing_mark

    holding, release = threading.Event(), threading.Event()

    def eraser() -> None:
        # Another process's erasure: it holds the person's eraser lock and has marked her.
        try:
            with erasure_running(agent_id=alice.agent.pk, user_id=PERSON):
                erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())
                holding.set()
                assert release.wait(30)
        finally:
            connection.close()

    side = threading.Thread(target=eraser)
    side.start()
    try:
        assert holding.wait(30)
        [mark] = erasures_marked(user_id=PERSON)
        assert mark.running
        assert erasures_resume()["running"] == 1
        assert not JobRun.objects.filter(kind=RESUME_KIND).exists()
        page = _officer().get(f"/admin/person/?id={PERSON}").content.decode()
        assert "erasing-running" in page and "in progress since" in page
    finally:
        release.set()
        side.join()
    # Its process gone with the mark left: interrupted.
    [mark] = erasures_marked(user_id=PERSON)
    assert not mark.running


def test_a_staff_request_interrupted_is_shown_on_its_page_and_finished_by_running_it_again(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    _register(alice)
    plant(alice)
    _killed_after_the_mentions(monkeypatch)
    with django_capture_on_commit_callbacks(execute=True):  # its job fails: the request says so
        erasure_request_file(user_id=PERSON, identifiers=[EMAIL], actor="staff:pat")
    monkeypatch.undo()
    request = ErasureRequest.objects.get(user_id=PERSON)
    assert request.status == ErasureRequest.Status.FAILED and _marked(alice.agent.pk)

    page = _officer().get(f"/admin/governance/erasurerequest/{request.pk}/change/").content.decode()
    assert "erasing-interrupted" in page and f"erasure request #{request.pk}</a> again" in page
    # The request's to finish: the sweep sends no job of its own (a second erasure racing it).
    assert erasures_resume()["requests"] == 1
    assert not JobRun.objects.filter(kind=RESUME_KIND).exists()
    assert resume.erasure_resume(mark_id=erasures_marked()[0].mark_id)["skipped"]

    with django_capture_on_commit_callbacks(execute=True):
        erasure_request_retry(request=request, actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    assert not _marked(alice.agent.pk)
    assert (
        "erasing-list" not in _officer().get(f"/admin/governance/erasurerequest/{request.pk}/change/").content.decode()
    )


def _release_once_an_eraser_waits(release: threading.Event, seen: list[bool]) -> None:
    """Set `release` once a process waits for a person's eraser lock (an erasure starting behind a
    write that holds it shared); `seen` says whether one did (within 30 s)."""
    from governance import locks
    from tests.forgetting.test_index_races import _until

    def waiting() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                " AND classid = %s::oid)",
                [locks.ERASURE_RUN],
            )
            return bool(cursor.fetchone()[0])

    try:
        _until(waiting, "an erasure waited for the write")
        seen.append(True)
    except AssertionError:
        seen.append(False)
    finally:
        release.set()
        connection.close()


def test_her_message_written_while_her_erasure_is_interrupted_does_not_show_it_running(alice: Caller) -> None:
    # A write of a message she sent holds her eraser lock shared for its transaction
    # (senders_erasing_refuse): that is no eraser, and the mark stays interrupted for the sweep.
    from memoryapp.subjects.erasing import erasing_mark, senders_erasing_refuse

    _register(alice)
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())  # no process runs it: interrupted
    holding, release = threading.Event(), threading.Event()

    def writer() -> None:
        try:
            with transaction.atomic():
                senders_erasing_refuse(agent_id=alice.agent.pk, senders={PERSON: "metadata.userId"})
                holding.set()
                assert release.wait(30)
        finally:
            connection.close()

    side = threading.Thread(target=writer)
    side.start()
    seen: list[bool] = []
    try:
        assert holding.wait(30)
        [mark] = erasures_marked(user_id=PERSON)
        # Before: running (any lock of the class counted, a writer's shared one too); the sweep left it.
        assert not mark.running
        # The resume job runs here (eagerly) and its erasure waits for the write to commit: the write
        # commits once it does (before, the write held on until its own wait timed out, 30 s, and
        # failed in its thread).
        watcher = threading.Thread(target=_release_once_an_eraser_waits, args=(release, seen))
        watcher.start()
        assert erasures_resume()["resumed"] == 1
        watcher.join(30)
        assert seen == [True]
    finally:
        release.set()
        side.join()


def test_an_eraser_of_the_same_person_in_another_database_does_not_show_it_running(alice: Caller) -> None:
    # pg_locks lists the locks of every database of the server: a staging copy on the same server
    # erasing the same agent's person holds the same lock numbers in its own database.
    import psycopg

    from governance import locks
    from memoryapp.subjects.erasing import erasing_mark

    _register(alice)
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())  # no process runs it: interrupted
    elsewhere = {**connection.get_connection_params(), "dbname": "postgres", "autocommit": True}
    with psycopg.connect(**elsewhere) as other:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [locks.ERASURE_RUN, locks.person(alice.agent.pk, PERSON)])
        [mark] = erasures_marked(user_id=PERSON)
    # Before: running (another database's lock counted); the sweep left it.
    assert not mark.running


def test_an_erasure_whose_connection_broke_reports_its_own_error_not_the_unlocks(alice: Caller) -> None:
    """The connection running the erasure is cut (PostgreSQL restarted, the backend terminated):
    the eraser's lock went with it, and the error the erasure raised is the one reported, not the
    unlock's on a dead connection."""
    with pytest.raises(Killed), erasure_running(agent_id=alice.agent.pk, user_id=PERSON):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        with psycopg_other() as other:
            other.execute("SELECT pg_terminate_backend(%s)", [pid])
        raise Killed
    connection.close()
    assert [mark.running for mark in erasures_marked(user_id=PERSON)] == []


def psycopg_other() -> Any:
    """A connection of its own to the tests' database (autocommit)."""
    import psycopg

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def test_the_job_runs_link_is_shown_only_to_who_may_open_them(alice: Caller) -> None:
    """No dead end: who follows erasure requests without the right to read job runs gets the list of
    people being erased without the link to the resume job runs."""
    from memoryapp.subjects.erasing import erasing_mark

    _register(alice)
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())
    link = "kind__exact=erasure_resume"
    may = staff_client(permissions=["view_erasurerequest", "view_jobrun"]).get("/admin/person/").content.decode()
    may_not = staff_client(permissions=["view_erasurerequest"]).get("/admin/person/").content.decode()
    assert "erasing-list" in may and link in may
    assert "erasing-list" in may_not and link not in may_not


def test_the_people_page_asks_as_many_queries_for_forty_marks_as_for_two(alice: Caller, bob: Caller) -> None:
    """Each interrupted mark's request was looked up by a query of its own; one request stands
    behind one mark of each count, and its row says to run it again."""
    from django.test.utils import CaptureQueriesContext

    from memoryapp.screening.identifiers import identifiers_set
    from memoryapp.subjects.erasing import erasing_mark

    officer = staff_client(permissions=["view_erasurerequest", "view_jobrun"])

    def marked(count: int) -> tuple[int, str]:
        for n in range(count):
            caller = (alice, bob)[n % 2]
            person = f"p-{count}-{n}"
            identifiers_set(agent=caller.agent, user_id=person, body={"emails": [f"{person}@x.example"]}, actor="t")
            erasing_mark(agent_id=caller.agent.pk, user_id=person, keeps=())
        request = ErasureRequest.objects.create(
            user_id=f"p-{count}-1", agent_ids=[bob.agent.pk], status=ErasureRequest.Status.FAILED
        )
        with CaptureQueriesContext(connection) as queries:
            page = officer.get("/admin/person/").content.decode()
        assert f"erasure request #{request.pk}</a> again" in page
        return len(queries), page

    few, _ = marked(2)
    many, page = marked(40)
    assert page.count('class="erasing-interrupted"') == 42
    assert many == few


def test_a_forget_of_a_person_with_no_identifiers_interrupted_is_marked_and_resumed(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    """She has no identifier, registered or given: her mark was a column of her registry rows, so
    she was never marked, and her `forget` killed between two steps was left half done for ever
    (no resume, and none of her messages refused again)."""
    post_thread(alice, "t-ines", user_id=PERSON)
    post_entry(alice, "t-ines", role="user", content="I booked the flights myself.")
    post_thread(alice, "t-carl", user_id="u-carl")
    post_entry(alice, "t-carl", role="user", content="I fly on Monday.", metadata={"userId": PERSON})

    def killed(**_: Any) -> int:
        raise Killed

    # Killed after her items went, before her threads and messages do.
    monkeypatch.setattr(person, "sessions_of_person_delete", killed)
    with pytest.raises(Killed):
        person_erase(user_id=PERSON, agent_ids=[alice.agent.pk], actor="agent:alice")
    monkeypatch.undo()
    assert not PersonIdentifier.objects.filter(user_id=PERSON).exists()
    # Before: no mark (none of her registry rows to hold it).
    [mark] = erasures_marked(user_id=PERSON)
    assert not mark.running and mark.mode == "erase"

    # While the resume runs, a message of hers is refused (a process of its own: the eraser's
    # lock is its connection's).
    refused: list[int] = []
    threads_erase = person._threads_erase

    def her_message_meanwhile(**kwargs: Any) -> dict[str, int]:
        def write() -> None:
            try:
                answer = alice.client.post(
                    "/api/v1/threads/t-carl/entries",
                    {"role": "user", "content": "And back on Friday.", "metadata": {"userId": PERSON}},
                    format="json",
                )
                refused.append(answer.status_code)
            finally:
                connection.close()

        side = threading.Thread(target=write)
        side.start()
        side.join()
        return threads_erase(**kwargs)

    monkeypatch.setattr(person, "_threads_erase", her_message_meanwhile)
    with django_capture_on_commit_callbacks(execute=True):
        assert erasures_resume()["resumed"] == 1
    run = JobRun.objects.get(kind=RESUME_KIND)
    assert run.status == JobRun.Status.SUCCEEDED, run.error
    assert refused == [409]
    assert erasures_marked() == [] and not _marked(alice.agent.pk)
    assert not Thread.objects.filter(agent=alice.agent, external_id="t-ines").exists()
    assert not Entry.objects.filter(thread__agent=alice.agent, sender=PERSON).exists()
    assert Entry.objects.filter(thread__external_id="t-carl").count() == 0
