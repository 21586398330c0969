"""A legal hold placed in the admin while erasures of its person run, in a real Chromium: the privacy
officer fills the hold's form for the person in every agent, two of three agents (long slugs) have an
erasure of her running, and the page that follows says, once and readably at 1,280 px, that the hold
is placed, in which two agents an erasure started before it, and that it does not stop them."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any
from urllib.parse import quote

from governance.models import AuditRecord
from memoryapp.agents.services import agent_get_or_create
from memoryapp.models import LegalHold
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user, too_wide
from tests.kit.erasing import erasure_held
from tests.kit.mentions import PERSON

pytestmark = BROWSER_TEST

AGENTS = ("customer-support-eu-west-production", "billing-assistant", "travel-planner-staging")


def test_a_hold_placed_while_her_erasures_run_tells_the_officer_where(
    django_db_setup: Any, live_server: Any, chromium: Any
) -> None:
    agents = [agent_get_or_create(slug=slug)[0] for slug in AGENTS]
    staff_user("olga", role="privacy")
    with chromium() as browser, ExitStack() as running:
        for agent in (agents[0], agents[2]):
            running.enter_context(erasure_held(agent.pk))
        page = log_in(
            browser, live_server, "olga", then=quote("/admin/memoryapp/legalhold/add/", safe=""), wait_for="#id_user_id"
        )
        page.fill("#id_user_id", PERSON)
        page.fill("#id_reason", "Litigation Valdomiro v. Travel Co, court order 2026/1182")
        page.locator("input[name=_save]").click()
        page.wait_for_selector("ul.messagelist")
        warnings = page.locator("ul.messagelist li.warning")
        assert warnings.count() == 1
        told = warnings.inner_text()
        hold = LegalHold.objects.get()
        assert f"Hold #{hold.pk} is placed" in told
        assert f"agents {AGENTS[0]}, {AGENTS[2]}:" in told and AGENTS[1] not in told
        assert "does not stop it" in told and PERSON not in told
        assert too_wide(page) == []
        shoot(page, "hold-placed-during-erasures")
    placed = AuditRecord.objects.get(action="legal_hold.placed")
    assert placed.details["erasures_running"] == [agents[0].pk, agents[2].pk]
