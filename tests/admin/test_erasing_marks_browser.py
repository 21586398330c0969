"""People marked as being erased, at size, in a real Chromium: forty people of long ids across three
agents whose erasures were interrupted are listed on the people page, each saying what finishes it,
and the page does not scroll sideways at 1,280 px; the person's own page says it of them alone."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from governance.models import ErasureRequest
from memoryapp.agents.services import agent_get_or_create
from memoryapp.screening.identifiers import identifiers_set
from memoryapp.subjects.erasing import erasing_mark
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user, too_wide

pytestmark = BROWSER_TEST

AGENTS = ("customer-support-eu-west-production", "billing-assistant", "travel-planner-staging")


def test_forty_interrupted_erasures_are_listed_readably_for_the_privacy_officer(
    django_db_setup: Any, live_server: Any, chromium: Any
) -> None:
    people = []
    for n in range(40):
        agent = agent_get_or_create(slug=AGENTS[n % len(AGENTS)])[0]
        person = f"crm-person-{n:03d}-" + "x" * 40
        identifiers_set(agent=agent, user_id=person, body={"emails": [f"p{n}@example.org"]}, actor="test")
        erasing_mark(agent_id=agent.pk, user_id=person, keeps=())
        people.append(person)
    staff_user("olga", role="privacy")
    with chromium() as browser:
        page = log_in(browser, live_server, "olga", then=quote("/admin/person/", safe=""), wait_for="#erasing-list")
        rows = page.locator("#erasing-list tr.erasing-interrupted")
        assert rows.count() == 40
        # What a state means is said once, above the table; a row says which and since when.
        assert page.locator("#content").inner_text().count("finish erasures interrupted") == 1
        assert rows.nth(3).inner_text().split("\t")[-2:] == [
            rows.nth(3).inner_text().split("\t")[-2],
            "the schedule, within minutes",
        ]
        assert "interrupted since" in rows.nth(3).inner_text()
        # Its job runs, one click away.
        page.locator("#erasing-marks + p.help a").click()
        page.wait_for_selector("#changelist")
        assert "kind__exact=erasure_resume" in page.url
        page.go_back()
        page.wait_for_selector("#erasing-list")
        assert too_wide(page) == []
        page.locator("#erasing-marks").scroll_into_view_if_needed()
        shoot(page, "erasing-marks-people")

        one = quote(f"/admin/person/?{urlencode({'id': people[7]})}", safe="")
        page = log_in(browser, live_server, "olga", then=one, wait_for="#erasing-list")
        assert page.locator("#erasing-list tbody tr").count() == 1
        assert too_wide(page) == []
        shoot(page, "erasing-marks-person")

        # The request's page: its one person, the row saying to run it again.
        request = ErasureRequest.objects.create(user_id=people[7], status=ErasureRequest.Status.FAILED)
        mine = quote(f"/admin/governance/erasurerequest/{request.pk}/change/", safe="")
        page = log_in(browser, live_server, "olga", then=mine, wait_for="#erasing-list")
        assert page.locator("#erasing-list tbody tr").count() == 1
        assert f"erasure request #{request.pk} again" in page.locator("#erasing-list").inner_text()
        assert too_wide(page) == []
        shoot(page, "erasing-marks-request")
