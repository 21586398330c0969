"""An agent that never held her, in a redaction keeping mentions: a row naming her that a write
commits there during the erasure is kept as written, sealed under her key made at the mark. The
end's deletion of 'the keys made since the mark' must not take that key: the row would no longer open."""

from __future__ import annotations

from typing import Any

import pytest

from memoryapp.forgetting import person
from memoryapp.forgetting.person import person_erase
from memoryapp.models import Entry
from memoryapp.screening.identifiers import identifiers_given
from tests.kit.api import Caller, post_entry, post_thread
from tests.kit.crypto import encrypted  # noqa: F401  (a fixture)
from tests.kit.erasing import writes_run
from tests.kit.mentions import EMAIL, PERSON

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_kept_row_written_during_a_redaction_in_an_agent_that_never_held_her_still_opens(
    encrypted: Any,  # noqa: F811
    bob: Caller,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    post_thread(bob, "t-carl", user_id="u-carl")
    text = f"Carl wrote to {EMAIL} about the flights."
    written: list[Any] = []
    real = person.mentions_erase

    def mentions_erase(**kwargs: Any) -> Any:
        if not written:  # after the mark, before the end: another process writes a row naming her
            written.extend(writes_run(lambda: post_entry(bob, "t-carl", role="user", content=text), what="write"))
        return real(**kwargs)

    monkeypatch.setattr(person, "mentions_erase", mentions_erase)
    given = identifiers_given({"emails": [EMAIL]}, field="identifiers")
    person_erase(
        user_id=PERSON, agent_ids=[bob.agent.pk], identifiers=given, mode="redact", mentions="keep", actor="staff:pat"
    )
    [turn] = written
    assert turn["content"] == text  # her mentions kept: stored as written
    entry = Entry.objects.get(pk=turn["id"])
    assert entry.content == text
