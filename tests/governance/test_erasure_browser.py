"""A privacy officer erases a person from the admin, in a real headless Chromium.

From the person's thread she follows "Erase this person…", fills in the legal basis, reads what the
request would erase (counted by kind) and confirms it,
watches it run to the end on its page (jobs run eagerly in tests, as the other browser tests run
them: the page she lands on shows the request finished), opens the report, which found nothing
left, and downloads it. Screenshots (1280x800) go to bench/out/screenshots/.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from governance.audit.chain import audit_verify
from governance.models import AuditRecord, ErasureRequest
from memoryapp.models import MemoryItem, Thread
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user
from tests.kit.factories import AgentFactory, EntryFactory, MemoryItemFactory, ThreadFactory

pytestmark = BROWSER_TEST


@pytest.fixture
def officer(transactional_db: None, tmp_path: Path, settings: Any) -> User:
    settings.VAR_DIR = tmp_path / "var"  # the report's signing key, this test's own
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    return staff_user("pat", role="privacy")


def test_a_privacy_officer_erases_a_person_and_reads_the_report(
    django_db_setup, live_server, officer, chromium, tmp_path
) -> None:
    agent = AgentFactory(slug="concierge")
    thread = ThreadFactory(agent=agent, external_id="t-porto", user_id="u-ana")
    said = EntryFactory(thread=thread, role="user", content="My sister Lucinda moved to Porto last spring.")
    EntryFactory(thread=thread, role="assistant", content="Noted: your sister lives in Porto now.")
    MemoryItemFactory(
        agent=agent,
        subject="Ana",
        attribute="sister",
        value="Lucinda, in Porto",
        user_id="u-ana",
        evidence=[{"entry_id": said.id, "quote": "My sister Lucinda moved to Porto"}],
    )
    other = ThreadFactory(agent=agent, external_id="t-bob", user_id="u-bob")
    EntryFactory(thread=other, role="user", content="Bob's own words stay.")

    with chromium() as browser:
        then = f"/admin/memoryapp/thread/{thread.pk}/change/"
        page = log_in(browser, live_server, "pat", then=then, accept_downloads=True)
        page.click("#erase-person")

        expect(page.locator("#id_user_id")).to_have_value("u-ana")
        page.fill("#id_identifiers", "ana.pereira@example.org")
        page.fill("#id_legal_basis", "GDPR Art. 17(1)(a)")
        page.fill("#id_reason", "Her letter of 3 November")
        shoot(page, "erasure-request-form")
        page.click("#file-erasure")
        # What would go, counted, before anything is filed.
        expect(page.locator("#er-plan")).to_contain_text("threads about the person")
        expect(page.locator("#er-confirm-person")).to_have_text("u-ana")
        shoot(page, "erasure-request-confirm")
        page.click("#er-confirm")

        expect(page.locator(".messagelist .success")).to_contain_text("filed")
        expect(page.locator("#er-status")).to_contain_text("Done", timeout=30_000)
        expect(page.locator("#er-progress")).to_contain_text("100%")
        expect(page.locator("#er-person")).to_have_text("u-ana")
        shoot(page, "erasure-request-done")

        page.click("#er-report-link")
        expect(page.locator("#er-summary")).to_contain_text("found nothing left")
        expect(page.locator("#er-nothing-found")).to_be_visible()
        expect(page.locator("#er-tables tbody tr", has_text="memoryapp_entry")).to_have_count(1)
        expect(page.locator("#er-counts")).to_be_visible()
        shoot(page, "erasure-report", full_page=True)

        with page.expect_download() as download:
            page.click("#er-report-json")
        saved = tmp_path / "report.json"
        download.value.save_as(saved)

    request = ErasureRequest.objects.get()
    assert request.status == "done" and request.requested_by_name == "staff:pat"
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == request.report_sha256
    assert b"Lucinda" not in saved.read_bytes()
    assert not Thread.objects.filter(user_id="u-ana").exists() and not MemoryItem.objects.filter(user_id="u-ana")
    assert Thread.objects.filter(pk=other.pk).exists()
    assert AuditRecord.objects.get(action="erasure.done").details["report_sha256"] == request.report_sha256
    assert audit_verify().ok
