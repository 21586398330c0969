"""The newer governance pages at real sizes in a real headless Chromium (Debian's, driven by
Playwright), 1280 px wide, light and dark: hundreds of erasure and export requests, legal holds,
retention policies, compaction settings and job runs (tests/kit/governance_rows.py), an item used
hundreds of times. No page may be wider than the window (a table of long ids pushing the page
sideways), and each is photographed into bench/out/screenshots/governance-*.png.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from governance.models import JobRun
from memoryapp.models import Agent, LegalHold, RetentionPolicy
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user, too_wide
from tests.kit.factories import AgentFactory, MemoryItemFactory, ThreadFactory
from tests.kit.governance_rows import governance_rows

ROWS = 300

pytestmark = BROWSER_TEST


def test_the_governance_pages_fit_the_window_with_hundreds_of_rows(
    django_db_setup: Any,
    live_server: Any,
    transactional_db: Any,
    chromium: Callable[[], Any],
    tmp_path: Path,
    settings: Any,
) -> None:
    settings.VAR_DIR = tmp_path / "var"
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    rows = governance_rows(ROWS)
    staff_user("sam", superuser=True)
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
    wide: dict[str, Any] = {}
    with chromium() as browser:
        for dark in (False, True):
            page = log_in(browser, live_server, "sam", dark=dark)
            for name, url in pages.items():
                answer = page.goto(f"{live_server.url}{url}")
                assert answer is not None and answer.status == 200, (name, answer and answer.status)
                if found := too_wide(page):
                    wide[f"{name}{'-dark' if dark else ''}"] = found
                shoot(page, f"governance-{name}{'-dark' if dark else ''}")
            if not dark:
                page.goto(f"{live_server.url}{pages['erasure-add']}")
                # the agents' boxes scroll in a box of their own: the form stays in reach
                assert page.locator("#id_agents").bounding_box()["height"] < 300
                assert page.locator("#id_agents input").count() == agents
                page.fill("#id_user_id", rows.agents and erasure.user_id)
                page.fill("#id_legal_basis", "GDPR Art. 17(1)(a)")
                page.click("#file-erasure")
                page.wait_for_selector("#er-plan")
                if found := too_wide(page):
                    wide["erasure-confirm"] = found
                shoot(page, "governance-erasure-confirm")
    assert wide == {}, f"pages wider than the window (px beyond it, widest element): {wide}"


def _policy_pk() -> int:
    return RetentionPolicy.objects.filter(agent__isnull=False).order_by("pk").values_list("pk", flat=True)[0]


def _failed_run_pk() -> int:
    return JobRun.objects.filter(status="failed").order_by("pk").values_list("pk", flat=True)[0]


def _hold_pk() -> int:
    return LegalHold.objects.filter(lifted_at__isnull=False).order_by("pk").values_list("pk", flat=True)[0]
