"""An erasure interrupted and resumed from its mark (governance.erasure.resume) does what its first
run would have done: the mark carries the erasure's choices (the `mentions` mode, every group the
officer excluded with the reason recorded), not only the excluded groups that are the index's
tables. Before, a resume of an erasure that kept the participants lists (a group that is no table)
redacted them: what the officer had chosen to keep went."""

from __future__ import annotations

from typing import Any

import pytest

from governance.erasure.resume import RESUME_KIND, erasures_resume
from governance.erasure.services import erasure_request_file, erasure_request_retry, erasure_steps
from governance.models import AuditRecord, ErasureRequest, JobRun
from memoryapp.forgetting import person
from memoryapp.models import (
    ErasureMark,
    LegalHold,
    MemoryFileVersion,
    MemoryItem,
    PersonIdentifier,
    SubjectMention,
    Thread,
)
from memoryapp.models.people import thread_participants
from memoryapp.subjects.erasing import erasing_mark
from memoryapp.subjects.matching import PLACEHOLDER
from tests.kit.api import Caller, post_entry, post_thread
from tests.kit.mentions import EMAIL, IDENTIFIERS, NAME, PERSON, PHONE, plant

pytestmark = pytest.mark.django_db(transaction=True)  # the mark and the eraser's lock are committed


class Killed(Exception):
    """The worker running the erasure dies here."""


def _killed_after_the_first_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The erasure stops after the access log and her items went, before her threads, her
    messages and the mentions (the mark stays)."""

    def killed(**_: Any) -> int:
        raise Killed

    monkeypatch.setattr(person, "sessions_of_person_delete", killed)


def _resumed(capture: Any) -> JobRun:
    with capture(execute=True):
        assert erasures_resume()["resumed"] == 1
    run = JobRun.objects.get(kind=RESUME_KIND)
    assert run.status == JobRun.Status.SUCCEEDED, run.error
    assert not ErasureMark.objects.filter(user_id=PERSON).exists()
    return run


def _her_own_gone(alice: Caller) -> None:
    assert not Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert not PersonIdentifier.objects.filter(agent=alice.agent, user_id=PERSON).exists()


def _carls_turn(alice: Caller) -> str:
    thread = Thread.objects.get(agent=alice.agent, external_id="t-carl")
    return next(e.content for e in thread.entries.order_by("pk") if e.content.startswith("Please call"))


def test_a_forget_keeping_the_mentions_resumed_keeps_them(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    plant(alice)
    _killed_after_the_first_steps(monkeypatch)
    # The web process dies mid-way (here: the step raises; the client answers 500).
    answer = alice.client.post(
        f"/api/v1/users/{PERSON}/forget", {"identifiers": IDENTIFIERS, "mentions": "keep"}, format="json"
    )
    assert answer.status_code == 500
    monkeypatch.undo()
    mark = ErasureMark.objects.get(agent=alice.agent, user_id=PERSON)
    assert (mark.mode, mark.mentions, mark.excluded) == ("erase", "keep", {})

    run = _resumed(django_capture_on_commit_callbacks)
    _her_own_gone(alice)
    # The mentions she chose to keep are whole, as a `forget` run to its end leaves them.
    assert _carls_turn(alice) == f"Please call {NAME} on {PHONE} or write to {EMAIL} about the trip."
    assert MemoryItem.objects.filter(agent=alice.agent, subject=NAME).exists()
    trip = MemoryFileVersion.objects.filter(agent=alice.agent, path__endswith="trip.md").order_by("-pk").first()
    assert trip is not None and NAME in trip.content
    # A `keep` leaves the participants lists to the erasure, as the first run does.
    carl = Thread.objects.get(agent=alice.agent, external_id="t-carl")
    assert PERSON not in thread_participants(carl.metadata)
    assert run.result["mentions"] == "keep" and run.result["excluded"] == {}


def test_a_staff_erasure_excluding_a_group_that_is_no_table_resumed_keeps_it(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    plant(alice)
    excluded = {"participants": "legal_claims", "file_version": "legal_obligation"}
    _killed_after_the_first_steps(monkeypatch)
    with pytest.raises(Killed):
        # The staff erasure's own steps (a request's job runs them), with the officer's exclusions.
        erasure_steps(
            user_id=PERSON,
            agent_ids=[alice.agent.pk],
            mode="erase",
            actor="erasure:7",
            identifiers=[EMAIL, NAME, PHONE],
            exclude=excluded,
        )
    monkeypatch.undo()
    mark = ErasureMark.objects.get(agent=alice.agent, user_id=PERSON)
    assert (mark.mentions, mark.excluded) == ("redact", excluded)
    assert mark.keeps == ["file_version"]

    run = _resumed(django_capture_on_commit_callbacks)
    _her_own_gone(alice)
    # Before: only `file_version` was passed on (a table), and the participants list lost her.
    carl = Thread.objects.get(agent=alice.agent, external_id="t-carl")
    assert PERSON in thread_participants(carl.metadata)
    trip = MemoryFileVersion.objects.filter(agent=alice.agent, path__endswith="trip.md").order_by("-pk").first()
    assert trip is not None and NAME in trip.content
    # Every group not excluded went.
    assert _carls_turn(alice) == f"Please call {PLACEHOLDER} on {PLACEHOLDER} or write to {PLACEHOLDER} about the trip."
    assert not MemoryItem.objects.filter(agent=alice.agent, subject=NAME).exists()
    # The job run and the audit record of the resume say the same groups were kept, with the reasons.
    assert run.result["excluded"] == excluded
    record = AuditRecord.objects.filter(action="erasure.resumed").get()
    assert record.details["excluded"] == excluded and record.details["mentions"] == "redact"
    assert PERSON not in str(record.details)


TABLES = sorted(SubjectMention.Table.values)
STAFF_EXCLUDED = {"participants": "legal_claims", "file_version": "legal_obligation"}


@pytest.mark.parametrize(
    ("keeps", "request_excluded", "turn_kept", "participants_kept", "mentions"),
    [
        ([], None, False, False, "redact"),  # an agent's `forget`, mentions redacted
        (TABLES, None, True, False, "keep"),  # an agent's `forget` with mentions "keep"
        (["file_version"], STAFF_EXCLUDED, False, True, "redact"),  # a staff request's: its reasons
        (["file_version"], None, False, True, "redact"),  # unknown origin: errs towards keeping
    ],
)
def test_a_mark_written_before_it_kept_the_choices_resumes_on_the_side_of_keeping(
    alice: Caller,
    django_capture_on_commit_callbacks: Any,
    keeps: list[str],
    request_excluded: dict[str, str] | None,
    turn_kept: bool,
    participants_kept: bool,
    mentions: str,
) -> None:
    assert alice.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json").status_code == 200
    post_thread(alice, "t-carl", user_id="u-carl", metadata={"memoryUserIds": ["u-carl", PERSON]})
    said = f"Please call {NAME} about the trip."
    post_entry(alice, "t-carl", role="user", content=said)
    if request_excluded is not None:
        # Its request no longer stands behind the mark (done: a request queued, running, failed or
        # blocked is the one to run it again, with its own choices).
        ErasureRequest.objects.create(
            user_id=PERSON, agent_ids=[alice.agent.pk], excluded=request_excluded, status=ErasureRequest.Status.DONE
        )
    # A mark as written before 0064: the excluded tables alone, no process running its erasure.
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=keeps, mode="erase")
    assert ErasureMark.objects.get(user_id=PERSON).mentions == ""

    run = _resumed(django_capture_on_commit_callbacks)
    carl = Thread.objects.get(agent=alice.agent, external_id="t-carl")
    assert (PERSON in thread_participants(carl.metadata)) is participants_kept
    [turn] = [entry.content for entry in carl.entries.all()]
    assert (turn == said) is turn_kept
    assert run.result["mentions"] == mentions
    record = AuditRecord.objects.filter(action="erasure.resumed").get()
    assert record.details["old_mark"] is True and record.details["excluded"] == run.result["excluded"]
    if request_excluded is not None:
        assert run.result["excluded"] == request_excluded
    assert ("participants" in run.result["excluded"]) is participants_kept


def test_a_staff_request_interrupted_and_run_again_keeps_its_groups_and_its_receipt_says_so(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    plant(alice)
    _killed_after_the_first_steps(monkeypatch)
    with django_capture_on_commit_callbacks(execute=True):  # its job fails: the request says so
        erasure_request_file(
            user_id=PERSON, identifiers=[EMAIL, NAME, PHONE], actor="staff:pat", excluded=STAFF_EXCLUDED
        )
    monkeypatch.undo()
    request = ErasureRequest.objects.get(user_id=PERSON)
    assert request.status == ErasureRequest.Status.FAILED
    mark = ErasureMark.objects.get(agent=alice.agent, user_id=PERSON)
    assert (mark.mentions, mark.excluded) == ("redact", STAFF_EXCLUDED)

    with django_capture_on_commit_callbacks(execute=True):
        erasure_request_retry(request=request, actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    carl = Thread.objects.get(agent=alice.agent, external_id="t-carl")
    assert PERSON in thread_participants(carl.metadata)
    # The receipt says which groups were kept and why, as the filing's audit record does.
    filed = AuditRecord.objects.get(action="erasure.request", subject=str(request.pk))
    assert request.receipt is not None
    assert request.receipt["document"]["report"]["excluded"] == filed.details["excluded"] == STAFF_EXCLUDED


def test_a_staff_request_blocked_by_a_hold_placed_since_its_run_was_interrupted_is_not_resumed(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    plant(alice)
    _killed_after_the_first_steps(monkeypatch)
    with django_capture_on_commit_callbacks(execute=True):
        erasure_request_file(user_id=PERSON, identifiers=[EMAIL], actor="staff:pat")
    monkeypatch.undo()
    request = ErasureRequest.objects.get(user_id=PERSON)
    assert request.status == ErasureRequest.Status.FAILED
    LegalHold.objects.create(user_id=PERSON, reason="litigation", placed_by="pat")
    with django_capture_on_commit_callbacks(execute=True):
        erasure_request_retry(request=request, actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.BLOCKED
    # Before: the blocked request stood behind the mark no more, and the beat's resume erased her
    # threads under the hold.
    with django_capture_on_commit_callbacks(execute=True):
        assert erasures_resume() == {"running": 0, "requests": 1, "held": 0, "tried": 0, "resumed": 0}
    assert not JobRun.objects.filter(kind=RESUME_KIND).exists()
    assert Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert ErasureMark.objects.filter(agent=alice.agent, user_id=PERSON).exists()
