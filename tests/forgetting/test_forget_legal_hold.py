"""An agent's `forget` respects legal holds (GDPR art. 17(3)(e)), as a staff request does: a hold in
force on the person, or on one of her threads, in the calling agent answers 409 `legal_hold` with the
hold ids and changes nothing; a hold in another agent does not stand in the way; the beat's resume
of a `forget` interrupted waits behind a hold placed since, and finishes once it is lifted."""

from __future__ import annotations

from typing import Any

import pytest

from governance.erasure.resume import RESUME_KIND, erasure_resume, erasures_resume
from governance.models import AuditRecord, JobRun
from governance.retention.holds import legal_hold_lift, legal_hold_place
from memoryapp.forgetting import person
from memoryapp.forgetting.person import person_erase
from memoryapp.models import (
    ErasureMark,
    Thread,
)
from tests.kit.api import Caller, post_thread
from tests.kit.erasing import erasure_state, identifiers_register
from tests.kit.mentions import IDENTIFIERS, PERSON, plant

REASON = "Litigation Valdomiro v. Travel Co"


def _forget(caller: Caller) -> Any:
    return caller.client.post(f"/api/v1/users/{PERSON}/forget", {"identifiers": IDENTIFIERS}, format="json")


@pytest.mark.parametrize("on", ["person", "person in every agent", "her thread"])
def test_a_forget_under_a_legal_hold_is_refused_and_changes_nothing(alice: Caller, on: str) -> None:
    identifiers_register(alice)
    plant(alice)
    if on == "her thread":
        hold = legal_hold_place(reason=REASON, placed_by="pat", agent=alice.agent, thread_external_id="t-ines")
    else:
        agent = alice.agent if on == "person" else None
        hold = legal_hold_place(reason=REASON, placed_by="pat", agent=agent, user_id=PERSON)
    before = erasure_state(audit=True)

    answer = _forget(alice)

    # Before: 200, her threads deleted and her mentions redacted under the hold.
    assert answer.status_code == 409, answer.content
    error = answer.json()["error"]
    assert error["code"] == "legal_hold"
    assert error["user_id"] == PERSON and error["holds"] == [hold.pk] and error["field"] == "user_id"
    assert f"#{hold.pk}" in error["message"]
    assert "Litigation" not in answer.content.decode()  # the hold's reason is staff's, never told
    after = erasure_state(audit=True)
    refusal = AuditRecord.objects.exclude(pk__in=before["audit"]).get()
    assert after == {**before, "audit": sorted([*before["audit"], refusal.pk])}
    assert refusal.action == "person.erase.blocked" and refusal.outcome == "blocked"
    assert refusal.agent_id == alice.agent.pk and refusal.details == {"holds": [hold.pk]}
    assert PERSON not in str(refusal.details) + refusal.subject + refusal.thread_id
    assert "Litigation" not in str(refusal.details) + refusal.subject

    # Lifted, the same call erases her.
    legal_hold_lift(hold=hold, lifted_by="pat", reason="settled")
    answer = _forget(alice)
    assert answer.status_code == 200, answer.content
    assert not Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()


def test_a_hold_in_another_agent_does_not_stand_in_the_way(alice: Caller, bob: Caller) -> None:
    identifiers_register(alice)
    plant(alice)
    identifiers_register(bob)
    plant(bob)
    legal_hold_place(reason=REASON, placed_by="pat", agent=bob.agent, user_id=PERSON)
    legal_hold_place(reason=REASON, placed_by="pat", agent=bob.agent, thread_external_id="t-ines")

    answer = _forget(alice)

    assert answer.status_code == 200, answer.content
    assert answer.json()["counts"]["threads"] >= 1
    assert not Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    # Bob's memory of her, held, is whole; and bob's own forget is refused.
    assert Thread.objects.filter(agent=bob.agent, external_id="t-ines", user_id=PERSON).exists()
    assert _forget(bob).json()["error"]["code"] == "legal_hold"
    assert Thread.objects.filter(agent=bob.agent, external_id="t-ines", user_id=PERSON).exists()


class Killed(Exception):
    """The process running the `forget` dies here."""


@pytest.mark.django_db(transaction=True)  # the mark and the eraser's lock are committed
def test_the_resume_of_an_interrupted_forget_waits_behind_a_hold_placed_since(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    identifiers_register(alice)
    plant(alice)

    def killed(**_: Any) -> int:
        raise Killed

    monkeypatch.setattr(person, "identifiers_delete", killed)
    with pytest.raises(Killed):
        person_erase(user_id=PERSON, agent_ids=[alice.agent.pk], mode="erase", actor="agent:alice")
    monkeypatch.undo()
    mark = ErasureMark.objects.get(agent=alice.agent, user_id=PERSON)
    # A thread of hers written since (the first run took those there were), held by the officer.
    post_thread(alice, "t-ines-2", user_id=PERSON)
    hold = legal_hold_place(reason=REASON, placed_by="pat", agent=alice.agent, thread_external_id="t-ines-2")

    # Before: the beat sent the resume, which erased her thread under the hold.
    with django_capture_on_commit_callbacks(execute=True):
        assert erasures_resume() == {"running": 0, "requests": 0, "held": 1, "tried": 0, "resumed": 0}
    assert not JobRun.objects.filter(kind=RESUME_KIND).exists()
    # A resume sent before the hold was placed skips.
    assert erasure_resume(mark_id=mark.pk) == {"skipped": "legal holds", "holds": [hold.pk]}
    assert Thread.objects.filter(agent=alice.agent, external_id="t-ines-2").exists()
    assert ErasureMark.objects.filter(pk=mark.pk).exists()

    legal_hold_lift(hold=hold, lifted_by="pat", reason="settled")
    with django_capture_on_commit_callbacks(execute=True):
        assert erasures_resume()["resumed"] == 1
    run = JobRun.objects.get(kind=RESUME_KIND)
    assert run.status == JobRun.Status.SUCCEEDED, run.error
    assert not ErasureMark.objects.filter(pk=mark.pk).exists()
    assert not Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()
