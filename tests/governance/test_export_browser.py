"""A privacy officer exports a person in a real headless Chromium: from a thread of theirs, "export
this person…", the form filled in, the request filed, its list row until the archive is ready, the
download, and what the downloaded zip holds. Screenshots into bench/out/screenshots/."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from governance.models import AuditRecord, ExportRequest
from governance.receipts import receipt_verify
from memoryapp.agents.services import agent_get_or_create
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user, too_wide
from tests.kit.locomo_threads import locomo_thread

pytestmark = [pytest.mark.slow, *BROWSER_TEST]  # browser, and skipped without chromium


@pytest.fixture(autouse=True)
def export_dir(tmp_path: Path, settings: Any) -> Path:
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    return Path(settings.EXPORT_DIR)


def test_a_privacy_officer_exports_a_person_from_their_thread_and_downloads_the_archive(
    django_db_setup: None,
    live_server: Any,
    chromium: Any,
    tmp_path: Path,
) -> None:
    concierge, _ = agent_get_or_create(slug="concierge")
    planner, _ = agent_get_or_create(slug="planner")
    thread = locomo_thread(agent=concierge, external_id="ana-trip", turns=60, user_id="u-ana")
    locomo_thread(agent=planner, external_id="ana-plans", turns=20, user_id="u-ana")
    locomo_thread(agent=concierge, external_id="ben-trip", turns=20, user_id="u-ben")
    staff_user("olga", role="privacy")
    url = f"/admin/memoryapp/thread/{thread.pk}/change/"

    with chromium() as browser:
        page = log_in(browser, live_server, "olga", then=url)
        page.goto(f"{live_server.url}{url}")
        page.click("#export-person")
        page.wait_for_selector("#id_user_id")
        assert page.input_value("#id_user_id") == "u-ana"
        # The admin's two lists (a filter box over hundreds of agents), which the admin's script builds
        # after the page has loaded: the thread's agent is chosen.
        page.wait_for_selector("#id_agents_to", state="attached")
        chosen = page.eval_on_selector("#id_agents_to", "s => Array.from(s.options).map(o => o.text)")
        assert chosen == ["concierge"]
        # Every agent: none chosen.
        page.click("#id_agents_remove_all")
        assert page.eval_on_selector("#id_agents_to", "s => s.options.length") == 0
        shoot(page, "export-form")
        page.click("input[name=_save]")
        page.wait_for_selector(".export-download", timeout=60_000)  # the page reloads when the run ends
        row = page.locator("#result_list tbody tr").first
        assert "u-ana" in row.inner_text() and "Done" in row.inner_text()
        assert too_wide(page) == []
        shoot(page, "export-list")
        with page.expect_download() as waiting:
            page.click(".export-download")
        download = waiting.value
        saved = tmp_path / "downloaded.zip"
        download.save_as(str(saved))
        page.click("#result_list tbody tr a")
        page.wait_for_selector("#download-archive")
        shoot(page, "export-request")

    request = ExportRequest.objects.get()
    assert download.suggested_filename == f"export-{request.pk}.zip"
    with zipfile.ZipFile(saved) as archive:
        names = set(archive.namelist())
        manifest = json.loads(archive.read("manifest.json"))
        receipt = json.loads(archive.read("receipt.json"))
        nodes = archive.read("threads/concierge/ana-trip.jsonl").decode().count('"type":"node"')
    assert {"threads/concierge/ana-trip.jsonl", "threads/planner/ana-plans.jsonl"} <= names
    assert not [n for n in names if "ben-trip" in n]
    assert manifest["counts"]["threads"] == 2 and nodes == 60
    assert receipt_verify(receipt) and receipt["document"]["manifest_sha256"] == request.manifest_sha256
    assert AuditRecord.objects.filter(action="export.download", actor="staff:olga").count() == 1
