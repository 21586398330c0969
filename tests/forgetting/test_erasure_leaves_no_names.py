"""What stays after a person's erasure names nothing of theirs (issue 25, found by the capstone in
tests/governance/test_erasure_capstone.py): a fork of their thread handed to another person keeps
none of the metadata it copied from it, a lifted hold on their thread names it by their pseudonym."""

from __future__ import annotations

from governance.retention.holds import legal_hold_lift, legal_hold_place
from memoryapp.forgetting.person import person_erase
from memoryapp.models import LegalHold, Thread
from tests.kit.api import Caller, post_entry, post_ok, post_thread

PERSON = "p-ines"
THREAD = f"trip:{PERSON}"


def test_a_fork_handed_to_another_keeps_only_what_its_owner_wrote_and_holds_unname_her_thread(alice: Caller) -> None:
    post_thread(alice, THREAD, user_id=PERSON, metadata={"contact": "ines@example.org", "note": "hers"})
    first = post_entry(alice, THREAD, role="user", content="Book the train.")
    post_ok(alice.client, f"/api/v1/threads/{THREAD}/fork", {"entry_id": first["id"], "new_thread_id": "carl-copy"})
    post_thread(alice, "carl-copy", user_id="u-carl", metadata={"note": "Carl's own", "desk": 4}, status=200)
    copied = Thread.objects.get(agent=alice.agent, external_id="carl-copy").metadata
    assert copied["contact"] == "ines@example.org" and copied["forkedFrom"] == THREAD
    hold = legal_hold_place(reason="case 7", placed_by="staff:pat", agent=alice.agent, thread_external_id=THREAD)
    legal_hold_lift(hold=hold, lifted_by="staff:pat", reason="settled")

    person_erase(user_id=PERSON, agent_ids=[alice.agent.pk])

    fork = Thread.objects.get(agent=alice.agent, external_id="carl-copy")
    assert fork.user_id == "u-carl" and fork.metadata == {"note": "Carl's own", "desk": 4}
    kept = LegalHold.objects.get(pk=hold.pk)
    assert kept.thread_external_id.startswith("psn_") and PERSON not in kept.thread_external_id
    assert kept.lifted_at is not None
