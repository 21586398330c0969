"""The console's lists show what tells rows apart at 1,280 px: a long thread id cut in the middle (all
of it on hover), audit details in words, a stale item beside the value of the item kept, a webhook's
failures and last error. The browser test (test_console_lists_browser.py) measures the widths."""

from __future__ import annotations

import pytest
from django.utils import timezone

from governance.audit.chain import audit_append
from memoryapp.items.services import STALE_BY_DEDUPE, StaleMark, items_mark_stale
from memoryapp.models import Webhook
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.factories import MemoryItemFactory, ThreadFactory

pytestmark = pytest.mark.django_db

LONG_ID = ("conversation-0001-" + "5f0c2a9e7b3d4c1e8a6f9b2d4e7c1a3f" * 4)[:128]


def test_the_threads_list_cuts_a_128_character_id_and_keeps_it_whole_on_hover(alice: Caller) -> None:
    ThreadFactory(agent=alice.agent, external_id=LONG_ID)
    page = staff_client(is_superuser=True).get("/admin/memoryapp/thread/").content.decode()
    assert f'title="{LONG_ID}"' in page
    assert f">{LONG_ID}<" not in page  # never shown whole in the cell
    assert f"{LONG_ID[:31]}…{LONG_ID[-8:]}" in page


def test_the_audit_list_shows_details_in_words_with_the_stored_json_on_hover(alice: Caller) -> None:
    audit_append(
        action="erasure.completed", agent_id=alice.agent.pk, details={"branches_deleted": 1, "item_ids": ["a", "b"]}
    )
    page = (
        staff_client(is_superuser=True)
        .get("/admin/governance/auditrecord/?action__exact=erasure.completed")
        .content.decode()
    )
    assert "branches deleted 1" in page and "item ids: 2" in page
    assert "branches_deleted 1" not in page
    assert "&quot;branches_deleted&quot;: 1" in page  # the stored JSON, on hover


def test_the_stale_list_shows_the_value_of_the_item_kept_beside_the_value_marked(alice: Caller) -> None:
    kept = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Lisbon by the river")
    repeat = MemoryItemFactory(agent=alice.agent, attribute="home", value="her home is Lisbon")
    items_mark_stale(
        marks=[StaleMark(item_id=repeat.pk, because={"by": STALE_BY_DEDUPE, "reason": "duplicate", "kept": kept.pk})],
        actor="job:dedupe",
    )
    page = staff_client(username="rita", groups=("Reviewers",)).get("/admin/memoryapp/staleitem/").content.decode()
    assert "her home is Lisbon" in page
    assert "lives in Lisbon by the river" in page
    assert "Value of the item kept" in page


def test_the_webhooks_list_shows_failures_and_the_last_error(alice: Caller) -> None:
    url = "https://hooks.example.org/" + "a" * 200
    Webhook.objects.create(
        agent=alice.agent,
        url=url,
        secret="s",
        failures=4,
        last_error="the receiver answered 503",
        last_failure_at=timezone.now(),
    )
    page = staff_client(username="olga", groups=("Operators",)).get("/admin/memoryapp/webhook/").content.decode()
    assert '<td class="field-failures">4</td>' in page
    assert "the receiver answered 503" in page
    assert f">{url}<" not in page  # the URL is cut in its cell, whole on hover
    assert f'title="{url}"' in page
