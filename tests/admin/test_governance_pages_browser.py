"""The newer governance pages at real sizes in a real headless Chromium (Debian's, driven by
Playwright), 1280 px wide, light and dark: hundreds of erasure and export requests, legal holds,
retention policies, compaction settings and job runs (tests/kit/governance_rows.py), an item used
hundreds of times. No page may be wider than the window (a table of long ids pushing the page
sideways), and each is photographed into bench/out/screenshots/governance-*.png.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from memoryapp.models import Agent
from tests.kit import PROJECT_ROOT
from tests.kit.factories import AgentFactory, MemoryItemFactory, StaffFactory, ThreadFactory
from tests.kit.governance_rows import governance_rows

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = PROJECT_ROOT / "bench" / "out" / "screenshots"
PASSWORD = "every-page-at-its-size-2026"
VIEWPORT = {"width": 1280, "height": 800}
ROWS = 300

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not shutil.which("chromium"),
        reason=f"{CHROMIUM} is not installed (apt-get install chromium)",
    ),
]

# How far the page reaches beyond the window, or a box of the content beyond its own width (Django
# wraps a list's table in a box that scrolls sideways: columns out of sight count as too wide too).
WIDEST = """() => {
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
  const found = [];
  const page = document.documentElement.scrollWidth - window.innerWidth;
  if (page > 0) found.push(['page', page]);
  for (const el of document.querySelectorAll('#content *')) {
    const over = el.scrollWidth - el.clientWidth;
    const style = getComputedStyle(el);
    if (over > 1 && el.clientWidth > 0 && ['auto', 'scroll'].includes(style.overflowX)) {
      const columns = [...el.querySelectorAll('thead th')].map((th) => `${th.innerText.trim()}:${Math.round(th.offsetWidth)}`);
      found.push([name(el), over, columns.join(' ')]);
    }
  }
  return found;
}"""


def _browser(p: Any) -> Any:
    return p.chromium.launch(
        executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
        args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
    )


def _login(browser: Any, live_server: Any, *, dark: bool) -> Any:
    page = browser.new_page(viewport=VIEWPORT, color_scheme="dark" if dark else "light")
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", "sam")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#content")
    return page


def test_the_governance_pages_fit_the_window_with_hundreds_of_rows(
    django_db_setup: Any, live_server: Any, transactional_db: Any, monkeypatch: Any, tmp_path: Path, settings: Any
) -> None:
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    settings.VAR_DIR = tmp_path / "var"
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    rows = governance_rows(ROWS)
    StaffFactory(username="sam", password=PASSWORD, is_superuser=True)
    unheld = AgentFactory(slug="travel-desk")
    for n in range(2):
        ThreadFactory(agent=unheld, external_id=f"t-{n}", turns=[("user", "hello"), ("assistant", "hi")] * 30)
    for n in range(60):  # the memory items list: long slugs, subjects, values and person ids
        MemoryItemFactory(
            agent=rows.agents[n % 3],
            subject=f"Ana Maria Pereira de Souza {n}",
            attribute="favourite places to travel to",
            value="the lighthouse by the harbour where her grandmother lived " * 4,
            user_id=f"auth0:{n:04d}-5f0c2a9e7b3d4c1e8a6f9b2d4e7c1a3f-pereira.ana.maria@example.org",
        )
    agents = Agent.objects.count()
    erasure, export, item = rows.finished_erasure, rows.finished_export, rows.item
    running = type(erasure).objects.filter(status="running").order_by("pk").first()
    pages = {
        "erasure-list": "/admin/governance/erasurerequest/",
        "erasure-add": "/admin/governance/erasurerequest/add/",
        "erasure-running": f"/admin/governance/erasurerequest/{running.pk}/change/",
        "erasure-done": f"/admin/governance/erasurerequest/{erasure.pk}/change/",
        "erasure-report": f"/admin/governance/erasurerequest/{erasure.pk}/report/",
        "export-list": "/admin/governance/exportrequest/",
        "export-change": f"/admin/governance/exportrequest/{export.pk}/change/",
        "export-add": "/admin/governance/exportrequest/add/",
        "hold-list": "/admin/memoryapp/legalhold/",
        "hold-add": "/admin/memoryapp/legalhold/add/",
        "hold-change": f"/admin/memoryapp/legalhold/{_hold_pk()}/change/",
        "retention-list": "/admin/memoryapp/retentionpolicy/",
        "retention-change": f"/admin/memoryapp/retentionpolicy/{_policy_pk()}/change/",
        "schedules": "/admin/governance/jobrun/schedules/",
        "overview": "/admin/",
        "compaction-list": "/admin/memoryapp/compactionsettings/",
        "compaction-change": f"/admin/memoryapp/compactionsettings/{rows.agents[1].pk}/change/",
        "item-uses": f"/admin/memoryapp/memoryitem/{item.pk}/change/#item-uses",
        "item-list": "/admin/memoryapp/memoryitem/",
        "jobrun-list": "/admin/governance/jobrun/",
        "agent-delete-held": f"/admin/memoryapp/agent/{rows.agents[1].pk}/delete/",
        "agent-delete": f"/admin/memoryapp/agent/{unheld.pk}/delete/",
        "jobrun-failed": f"/admin/governance/jobrun/{_failed_run_pk()}/change/",
    }
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    wide: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = _browser(p)
        try:
            for dark in (False, True):
                page = _login(browser, live_server, dark=dark)
                for name, url in pages.items():
                    answer = page.goto(f"{live_server.url}{url}")
                    assert answer is not None and answer.status == 200, (name, answer and answer.status)
                    if found := page.evaluate(WIDEST):
                        wide[f"{name}{'-dark' if dark else ''}"] = found
                    page.screenshot(path=str(SCREENSHOTS / f"governance-{name}{'-dark' if dark else ''}.png"))
                if not dark:
                    page.goto(f"{live_server.url}{pages['erasure-add']}")
                    # the agents' boxes scroll in a box of their own: the form stays in reach
                    assert page.locator("#id_agents").bounding_box()["height"] < 300
                    assert page.locator("#id_agents input").count() == agents
                    page.fill("#id_user_id", rows.agents and erasure.user_id)
                    page.fill("#id_legal_basis", "GDPR Art. 17(1)(a)")
                    page.click("#file-erasure")
                    page.wait_for_selector("#er-plan")
                    if found := page.evaluate(WIDEST):
                        wide["erasure-confirm"] = found
                    page.screenshot(path=str(SCREENSHOTS / "governance-erasure-confirm.png"))
        finally:
            browser.close()
    assert wide == {}, f"pages wider than the window (px beyond it, widest element): {wide}"


def _policy_pk() -> int:
    from memoryapp.models import RetentionPolicy

    return RetentionPolicy.objects.filter(agent__isnull=False).order_by("pk").values_list("pk", flat=True)[0]


def _failed_run_pk() -> int:
    from governance.models import JobRun

    return JobRun.objects.filter(status="failed").order_by("pk").values_list("pk", flat=True)[0]


def _hold_pk() -> int:
    from memoryapp.models import LegalHold

    return LegalHold.objects.filter(lifted_at__isnull=False).order_by("pk").values_list("pk", flat=True)[0]
