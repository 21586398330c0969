"""A person's registered identifiers on their staff page, in a real Chromium, both ways for
permissions: a privacy officer reads them opened (sealed at rest under the person's key), edits them
(normalised, audited with counts, the subject index's job sent) and is told of a bad one by its
field; a reviewer sees how many there are, never their values, and no form."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from governance.models import AuditRecord, JobRun
from memoryapp.agents.services import agent_get_or_create
from memoryapp.models import PersonIdentifier
from memoryapp.screening.identifiers import identifiers_of, identifiers_set
from memoryapp.threads.services import thread_create
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user, too_wide

pytestmark = BROWSER_TEST

PERSON = "u-ines"
EMAIL = "ines.valdomiro@example.org"


def _page(person: str = PERSON) -> str:
    return quote(f"/admin/person/?{urlencode({'id': person})}", safe="")


def test_a_privacy_officer_reads_and_edits_a_persons_identifiers_and_a_reviewer_sees_only_counts(
    django_db_setup: Any, live_server: Any, chromium: Any
) -> None:
    support = agent_get_or_create(slug="customer-support-eu")[0]
    agent_get_or_create(slug="billing-assistant")
    thread_create(agent=support, external_id="t-ines", user_id=PERSON)
    identifiers_set(agent=support, user_id=PERSON, body={"emails": [EMAIL], "names": ["Inês Valdomiro"]}, actor="test")
    staff_user("olga", role="privacy")
    staff_user("rita", role="reviewer")
    wide: dict[str, Any] = {}
    with chromium() as browser:
        page = log_in(browser, live_server, "olga", then=_page(), wait_for="#person-identifiers")
        block = page.locator('.person-identifiers[data-agent="customer-support-eu"]')
        assert block.locator('textarea[name="emails"]').input_value() == EMAIL
        assert block.locator('textarea[name="names"]').input_value() == "ines valdomiro"
        # A bad phone: refused naming its field, nothing saved.
        block.locator('textarea[name="phones"]').fill("call me maybe")
        block.locator("input[type=submit]").click()
        page.wait_for_selector(".messagelist .error")
        assert "phones[0]" in page.locator(".messagelist").inner_text()
        # A good one, written as people write it: stored in E.164.
        block = page.locator('.person-identifiers[data-agent="customer-support-eu"]')
        block.locator('textarea[name="phones"]').fill("+351 912 345 678")
        block.locator("input[type=submit]").click()
        page.wait_for_selector(".messagelist .success")
        assert "1 phones" in page.locator(".messagelist").inner_text()
        assert EMAIL not in page.locator(".messagelist").inner_text()  # counts only, never values
        block = page.locator('.person-identifiers[data-agent="customer-support-eu"]')
        assert block.locator('textarea[name="phones"]').input_value() == "+351912345678"
        # Another agent: registered from the form for agents without any.
        new = page.locator("#person-identifiers-new")
        new.locator("select[name=agent]").select_option(label="billing-assistant")
        new.locator('textarea[name="external_ids"]').fill("crm-4411")
        new.locator("input[type=submit]").click()
        page.wait_for_selector('.person-identifiers[data-agent="billing-assistant"]')
        assert page.locator("#person-erase").is_visible() and page.locator("#person-export").is_visible()
        if found := too_wide(page):
            wide["officer"] = found
        page.locator("#person-identifiers").scroll_into_view_if_needed()
        shoot(page, "person-identifiers-officer")

        page = log_in(browser, live_server, "rita", then=_page(), wait_for="#person-identifiers")
        text = page.locator("#content").inner_text()
        assert "1 e-mails · 1 phones · 1 names · 0 external ids" in text
        assert EMAIL not in text and "351912345678" not in text and "crm-4411" not in text
        assert page.locator("textarea").count() == 0 and page.locator("#person-erase").count() == 0
        if found := too_wide(page):
            wide["reviewer"] = found
        shoot(page, "person-identifiers-reviewer")
    assert wide == {}, f"pages wider than the window: {wide}"
    assert identifiers_of(agent=support, user_id=PERSON) == {
        "emails": [EMAIL],
        "phones": ["+351912345678"],
        "names": ["ines valdomiro"],
        "external_ids": [],
    }
    assert PersonIdentifier.objects.filter(user_id=PERSON).count() == 4
    saved = AuditRecord.objects.filter(action="person.identifiers_set", actor="staff:olga")
    assert saved.count() == 2 and EMAIL not in str(list(saved.values_list("details", flat=True)))
    assert JobRun.objects.filter(kind="subject_index", agent_id=support.pk).exists()
