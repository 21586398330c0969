"""A staff request's other identifiers are folded as the registry folds them (a name: accents off,
case folded), and folding may lengthen one (`ß` is `ss`): one past what the registry stores was
kept with the mark all the same, and the request failed at its first step on every run
(`DataError: value too long`), erasing nothing. It is left out of the names, as a value fitting
no kind is (memoryapp.screening.identifiers.identifiers_classified)."""

from __future__ import annotations

from typing import Any

import pytest

from governance.erasure.services import erasure_request_file
from governance.models import ErasureRequest
from memoryapp.models import Thread
from tests.kit.api import Caller, post_thread

pytestmark = pytest.mark.django_db(transaction=True)  # the mark is committed, as a worker's is


def test_a_request_whose_other_identifier_folds_too_long_erases_and_is_done(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    post_thread(alice, "t-ines", user_id="u-ines")
    with django_capture_on_commit_callbacks(execute=True):
        erasure_request_file(user_id="u-ines", actor="staff:pat", identifiers=["Ines Valdomiro", "\u00df" * 200])
    request = ErasureRequest.objects.get(user_id="u-ines")
    assert request.status == ErasureRequest.Status.DONE, request.error
    assert not Thread.objects.filter(agent=alice.agent, user_id="u-ines").exists()
