"""A staff erasure across every agent, given other identifiers of the person: those identifiers are
kept, sealed under her data key, in each agent for the erasure's span (memoryapp.subjects.erasing).
An agent that never held her must end with nothing of her: no data key row, no registry row, no
pseudonym secret, no mark."""

from __future__ import annotations

from typing import Any

import pytest

from governance.erasure.services import erasure_request_file
from governance.models import DataKey, ErasureRequest, PseudonymKey
from memoryapp.models import ErasureMark, PersonIdentifier
from tests.kit.api import Caller, post_entry, post_thread
from tests.kit.crypto import encrypted  # noqa: F401  (a fixture)
from tests.kit.mentions import EMAIL, PERSON

pytestmark = pytest.mark.django_db(transaction=True)  # the erasure commits batch by batch


def _hers(agent_id: int) -> dict[str, int]:
    return {
        "data_keys": DataKey.objects.filter(agent_id=agent_id, user_id=PERSON).count(),
        "identifiers": PersonIdentifier.objects.filter(agent_id=agent_id, user_id=PERSON).count(),
        "pseudonym_keys": PseudonymKey.objects.filter(agent_id=agent_id, user_id=PERSON).count(),
        "marks": ErasureMark.objects.filter(agent_id=agent_id, user_id=PERSON).count(),
    }


NOTHING = {"data_keys": 0, "identifiers": 0, "pseudonym_keys": 0, "marks": 0}


@pytest.mark.parametrize("mode", ["erase", "redact"])
def test_an_agent_that_never_held_her_ends_with_nothing_of_her(
    encrypted: Any,  # noqa: F811
    alice: Caller,
    bob: Caller,
    django_capture_on_commit_callbacks: Any,
    mode: str,
) -> None:
    post_thread(alice, "t-ines", user_id=PERSON)
    post_entry(alice, "t-ines", role="user", content="I booked the flights myself.")
    post_thread(bob, "t-carl", user_id="u-carl")
    post_entry(bob, "t-carl", role="user", content="Carl prefers green tea.")
    assert _hers(bob.agent.pk) == NOTHING

    with django_capture_on_commit_callbacks(execute=True):
        erasure_request_file(user_id=PERSON, identifiers=[EMAIL], mode=mode, actor="staff:pat")
    request = ErasureRequest.objects.get(user_id=PERSON)
    assert request.status == ErasureRequest.Status.DONE, request.error

    # Before: a data key of hers made in bob's agent (the given e-mail sealed under it), left there.
    assert _hers(bob.agent.pk) == NOTHING
    # Where she was held, her key is destroyed (erase) or kept (redact: rows stay sealed under it).
    assert DataKey.objects.filter(agent_id=alice.agent.pk, user_id=PERSON).count() == 1
    assert PersonIdentifier.objects.filter(user_id=PERSON).count() == 0
