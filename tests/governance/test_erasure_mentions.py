"""A staff erasure request's other identifiers act (issue 25 §4): every row of every agent naming
the person by one of them is redacted to a placeholder (or goes, when she is its subject), the
counts say so by table and kind, and a group the officer excluded, with its typed reason, stays."""

from __future__ import annotations

from typing import Any

import pytest

from governance.erasure.services import erasure_request_file
from governance.models import AuditRecord, ErasureRequest
from memoryapp.errors import DomainError
from memoryapp.models import MemoryFileVersion, MemoryItem, Thread
from tests.kit.api import Caller
from tests.kit.mentions import EMAIL, NAME, PERSON, PHONE, plant, rows_naming_her

# The request itself keeps what the officer typed (its identifiers): the one row allowed to.
REQUEST_TABLE = ErasureRequest._meta.db_table


def _file(django_capture_on_commit_callbacks: Any, **fields: Any) -> ErasureRequest:
    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id=PERSON, identifiers=[EMAIL, PHONE, NAME], actor="staff:pat", **fields)
    request.refresh_from_db()
    return request


def test_a_staff_erasure_redacts_every_mention_of_the_person_in_every_agent(
    alice: Caller, bob: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    plant(alice)
    plant(bob)
    request = _file(django_capture_on_commit_callbacks)

    assert request.status == ErasureRequest.Status.DONE, request.error
    left = rows_naming_her()
    left.pop(REQUEST_TABLE, None)
    assert left == {}
    assert request.counts["mentions_redacted_entry"] == 4  # two rows in each agent
    assert request.counts["mentions_deleted_item"] == 2 and request.counts["mentions_redacted_participants"] == 2
    carl = Thread.objects.get(agent=alice.agent, external_id="t-carl")
    assert carl.metadata["memoryUserIds"] == ["u-carl"] and carl.metadata["contact"] == "[erased person]"


def test_an_excluded_group_stays_and_its_typed_reason_is_audited(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    plant(alice)
    request = _file(django_capture_on_commit_callbacks, excluded={"file_version": "legal_obligation"})

    assert request.status == ErasureRequest.Status.DONE, request.error
    assert MemoryFileVersion.objects.filter(agent=alice.agent, content__icontains="Valdomiro").count() == 2
    assert not MemoryItem.objects.filter(agent=alice.agent, value__icontains="Valdomiro").exists()
    filed = AuditRecord.objects.get(action="erasure.request", subject=str(request.pk))
    assert filed.details["excluded"] == {"file_version": "legal_obligation"}
    assert "counts" in request.report or request.report is not None


@pytest.mark.parametrize(
    ("excluded", "field"),
    [
        ({"nothing": "legal_obligation"}, "excluded"),
        ({"entry": "because I say so"}, "excluded.entry"),
        (["entry"], "excluded"),
    ],
)
def test_an_exclusion_must_name_a_group_and_a_typed_reason(alice: Caller, excluded: Any, field: str) -> None:
    with pytest.raises(DomainError) as refused:
        erasure_request_file(user_id=PERSON, actor="staff:pat", excluded=excluded)
    assert refused.value.field == field
    assert not ErasureRequest.objects.exists()
