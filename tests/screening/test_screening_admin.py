"""Screening in the admin: operators set an agent's policy (audited, checked as the API checks it);
reviewers release held entries, privacy officers delete them; each role only its own."""

from __future__ import annotations

from django.urls import reverse

from governance.models import AuditRecord
from memoryapp.models import Entry
from tests.kit.admin import staff_client
from tests.kit.api import THREADS, Caller, get_ok, patch_ok, post_ok, post_thread

CARD_TURN = "pay with 4111 1111 1111 1111 please"


def held_entry(caller: Caller) -> Entry:
    patch_ok(caller.client, "/api/v1/settings/screening", {"payment_card": "hold"})
    post_thread(caller, "t-h")
    post_ok(caller.client, f"{THREADS}/t-h/entries", {"role": "user", "content": CARD_TURN})
    entry = Entry.objects.get(thread__external_id="t-h")
    assert entry.held_at is not None
    return entry


def test_an_operator_sets_an_agents_screening_policy_on_its_page_and_it_is_audited(alice: Caller) -> None:
    operator = staff_client(groups=("Operators",))
    url = reverse("admin:memoryapp_screeningsettings_change", args=[alice.agent.pk])
    page = operator.get(url)
    assert page.status_code == 200 and b"payment card" in page.content
    form = {category: action for category, action in get_ok(alice.client, "/api/v1/settings/screening").items()}
    form["email"] = "redact"
    assert operator.post(url, form).status_code == 302
    assert get_ok(alice.client, "/api/v1/settings/screening")["email"] == "redact"
    record = AuditRecord.objects.get(action="screening.policy_set")
    assert record.details == {"changed": {"email": "redact"}} and record.actor.startswith("staff:")
    assert operator.post(url, {**form, "email": "shred"}).status_code == 200  # the form's error, nothing saved
    assert AuditRecord.objects.filter(action="screening.policy_set").count() == 1


def test_a_reviewer_may_not_change_a_screening_policy_nor_an_operator_read_held_entries(alice: Caller) -> None:
    reviewer = staff_client(groups=("Reviewers",))
    url = reverse("admin:memoryapp_screeningsettings_change", args=[alice.agent.pk])
    assert reviewer.get(url).status_code == 403
    held_entry(alice)
    operator = staff_client(groups=("Operators",))
    assert operator.get(reverse("admin:memoryapp_heldentry_changelist")).status_code == 403


def test_a_reviewer_releases_a_held_entry_and_a_privacy_officer_deletes_one(alice: Caller) -> None:
    entry = held_entry(alice)
    listing = reverse("admin:memoryapp_heldentry_changelist")
    reviewer = staff_client(groups=("Reviewers",))
    page = reviewer.get(listing)
    assert page.status_code == 200 and entry.pk.encode() in page.content
    # A reviewer may not delete; a privacy officer may not release.
    reviewer.post(listing, {"action": "delete_held", "_selected_action": [entry.pk]})
    officer = staff_client(groups=("Privacy officers",))
    officer.post(listing, {"action": "release", "_selected_action": [entry.pk]})
    entry.refresh_from_db()
    assert entry.held_at is not None
    assert reviewer.post(listing, {"action": "release", "_selected_action": [entry.pk]}).status_code == 302
    entry.refresh_from_db()
    assert entry.held_at is None
    assert AuditRecord.objects.filter(action="screening.released", subject=entry.pk).count() == 1

    post_ok(alice.client, f"{THREADS}/t-h/entries", {"role": "user", "content": CARD_TURN})
    second = Entry.objects.get(thread__external_id="t-h", held_at__isnull=False)
    assert officer.post(listing, {"action": "delete_held", "_selected_action": [second.pk]}).status_code == 302
    assert not Entry.objects.filter(pk=second.pk).exists()
