"""The staff console's dead ends of issue 23 (§14-18), walked in a real headless Chromium (Debian's,
driven by Playwright) at 1,280 px, light and dark, with dozens of rows:

- §14 every link of the entity pages list opens its page; the page gives the values the width.
- §15 the erasure's confirm step (its dry run) counts what the report counts and names the shared
  playbook rule it removes.
- §16 "What did the agent know?" opened from a thread's page: the thread's whole scope, said.
- §17 revoking a key, lifting a hold (with a reason), the prune (dry run first) and running a
  blocked erasure again (fresh counts) each confirm first.
- §18 an out-of-date playbook draft is marked in the list and on its page, its button disabled.

The dark pass only opens and photographs the pages (nothing confirmed); the light pass confirms and
the database is checked after it. Screenshots: bench/out/screenshots/console-*.png.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.contrib.admin.utils import quote
from playwright.sync_api import Page, expect

from governance.models import AuditRecord, ErasureRequest, JobRun
from governance.retention.services import PRUNE_JOB_KIND
from memoryapp.consolidation.fold import PLAYBOOK_DRAFT_PATH, PLAYBOOK_PATH, playbook_file, playbook_fold
from memoryapp.items.rules import Scope
from memoryapp.llm.port import use_model
from memoryapp.models import Agent, AgentKey, Entity, LegalHold, MemoryFileVersion, MemoryItem, RetentionPolicy, Thread
from tests.governance.test_erasure_admin import _dan_planted_across_kinds
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user, too_wide
from tests.kit.consolidation import active_item, answers, scripted
from tests.kit.factories import EntityFactory, EntryFactory, MemoryFileVersionFactory, ThreadFactory
from tests.retention.world import aged_thread

pytestmark = BROWSER_TEST

ROWS = 40
LONG_VALUE = "the lighthouse by the harbour where her grandmother lived, every summer until she was twelve"


class _NoCallbacks:
    """`_dan_planted_across_kinds` takes the on-commit fixture; here every write commits by itself."""

    def __call__(self, execute: bool = False) -> Any:
        import contextlib

        return contextlib.nullcontext()


def _seed() -> dict[str, Any]:
    planted = _dan_planted_across_kinds(_NoCallbacks())
    alice: Agent = planted["agent"]
    # §14: dozens of entities with their items.
    entities = []
    for n in range(ROWS):
        entity = EntityFactory(agent=alice, name=f"Ana Maria Pereira {n}", user_id="u-ana", aliases=[f"Ana {n}"])
        for attribute in ("favourite place", "diet", "city"):
            active_item(agent=alice, subject=entity.name, attribute=attribute, value=f"{LONG_VALUE} ({n})")
        entities.append(entity)
    # §16: a thread of a person in a project, with items in each scope it reads, and dozens of others.
    trip = ThreadFactory(agent=alice, external_id="t-trip", user_id="u-ana", metadata={"project_id": "p-lisbon"})
    EntryFactory(thread=trip, role="user", content="Plan my Lisbon trip please.")
    for n in range(ROWS):
        ThreadFactory(agent=alice, external_id=f"t-other-{n}", user_id=f"u-{n}")
    active_item(agent=alice, subject="Ana", attribute="travel", value="by train", project_id="p-lisbon")
    active_item(agent=alice, subject="Ana", attribute="seat", value="window seat", thread_id="t-trip")
    # §17: dozens of keys, a hold stopping an erasure, an aged thread for the prune.
    bob = Agent.objects.create(slug="bob", name="bob")
    for n in range(ROWS):
        AgentKey.objects.create(agent=alice if n % 2 else bob, name=f"deploy {n}", prefix=f"k{n:04d}", key_hash=f"h{n}")
    hold = LegalHold.objects.create(user_id="u-held", reason="Litigation: Smith v. Acme", placed_by="staff:pat")
    held = ThreadFactory(agent=alice, external_id="t-held", user_id="u-held")
    EntryFactory(thread=held, role="user", content="Please keep my file.")
    blocked = ErasureRequest.objects.create(user_id="u-held", status="blocked", blocked_by=[hold.pk])
    RetentionPolicy.objects.create(agent=bob, thread_ttl_days=30)
    for n in range(3):
        aged_thread(bob, f"bob-old-{n}", days=40)
    # §18: a draft folded in the person's scope, then the playbook changed by hand: out of date.
    lesson = active_item(agent=alice, kind="lesson", subject="booking", attribute="dates", value="Dates first")
    MemoryFileVersionFactory(
        agent=alice, user_id="u-ana", path=PLAYBOOK_PATH, content=playbook_file(["Be brief."]), author="user"
    )
    with use_model(scripted(answers({"op": "add", "rule": f"Ask the dates first. [lesson:{lesson.pk}]"}))):
        playbook_fold(agent=alice, scope=Scope(user_id="u-ana"))
    draft = MemoryFileVersion.objects.get(agent=alice, user_id="u-ana", path=PLAYBOOK_DRAFT_PATH)
    MemoryFileVersionFactory(
        agent=alice, user_id="u-ana", path=PLAYBOOK_PATH, content=playbook_file(["Be kind."]), author="user"
    )
    for n in range(ROWS // 2):  # dozens of drafts beside it, every other one out of date too
        person = f"u-guest-{n:02d}"
        taught = active_item(agent=alice, kind="lesson", subject="booking", attribute=f"rule {n}", value=f"Rule {n}",
                             user_id=person)  # fmt: skip
        with use_model(scripted(answers({"op": "add", "rule": f"Rule {n}. [lesson:{taught.pk}]"}))):
            playbook_fold(agent=alice, scope=Scope(user_id=person))
        if n % 2:
            MemoryFileVersionFactory(
                agent=alice, user_id=person, path=PLAYBOOK_PATH, content=playbook_file([f"Be {n}."]), author="user"
            )
    staff_user("rita", role="reviewer")
    staff_user("pat", role="privacy")
    staff_user("olivia", role="operator")
    return {
        "alice": alice,
        "entities": entities,
        "trip": trip,
        "hold": hold,
        "blocked": blocked,
        "draft": draft,
        "shared_rule": planted["shared_rule"],
        "revoked": AgentKey.objects.get(prefix="k0001"),
    }


def _fits(page: Page, name: str, wide: dict[str, Any]) -> None:
    if found := too_wide(page):
        wide[name] = found


def _reviewer_pages(
    browser: Any, live_server: Any, seeded: dict[str, Any], *, dark: bool, wide: dict[str, Any]
) -> None:
    mode = "-dark" if dark else ""
    page = log_in(browser, live_server, "rita", then="/admin/memoryapp/entityoverview/", dark=dark)
    # §14: the list's links open their pages (the admin-escaped id is decoded).
    links = page.locator("#result_list tbody th a, #result_list tbody td a")
    expect(links.first).to_be_visible()
    assert links.count() >= 20
    _fits(page, f"entities{mode}", wide)
    shoot(page, f"console-entities{mode}")
    entity: Entity = seeded["entities"][0]
    page.locator(f'#result_list a[href*="/{quote(entity.pk)}/change/"]').click()
    expect(page.locator("#ep-items tbody tr")).to_have_count(3)
    value = page.locator("#ep-items tbody tr td.ep-value").first
    assert value.bounding_box()["width"] > 380, value.bounding_box()  # not squeezed into 130 px
    _fits(page, f"entity{mode}", wide)
    shoot(page, f"console-entity{mode}")
    # §16: from the thread's page, what the agent knew there, filled in, with its scope said.
    page.goto(f"{live_server.url}/admin/memoryapp/thread/{seeded['trip'].pk}/change/")
    page.click("#thread-known")
    expect(page.locator("#known-scope")).to_contain_text("Thread t-trip (person u-ana, project p-lisbon)")
    expect(page.locator(".known-table").last).to_contain_text("window seat")
    expect(page.locator(".known-table").last).to_contain_text("by train")
    _fits(page, f"known{mode}", wide)
    shoot(page, f"console-known-thread{mode}")
    # §18: the out-of-date draft is marked in the list and on its page; its button says why.
    page.goto(f"{live_server.url}/admin/memoryapp/playbookdraft/")
    expect(page.locator("#pd-drafts .pd-refused")).to_have_count(1 + ROWS // 4)
    expect(page.locator("#pd-drafts .pd-promotable")).to_have_count(ROWS // 4)
    shoot(page, f"console-drafts{mode}")
    page.goto(f"{live_server.url}/admin/memoryapp/playbookdraft/{seeded['draft'].pk}/review/")
    expect(page.locator("#pd-refused")).to_contain_text("promoting it would undo that change")
    expect(page.locator("#pd-promote")).to_be_disabled()
    _fits(page, f"draft{mode}", wide)
    shoot(page, f"console-draft-out-of-date{mode}")
    page.close()


def _officer_pages(browser: Any, live_server: Any, seeded: dict[str, Any], *, dark: bool, wide: dict[str, Any]) -> None:
    mode = "-dark" if dark else ""
    page = log_in(browser, live_server, "pat", then="/admin/governance/erasurerequest/add/", dark=dark)
    # §15: the confirm step is the erasure's dry run, naming the shared playbook rule.
    page.fill("#id_user_id", "u-dan")
    page.fill("#id_legal_basis", "GDPR Art. 17(1)(a)")
    page.click("#file-erasure")
    expect(page.locator("#er-shared-files")).to_contain_text("/memories/playbook.md")
    expect(page.locator("#er-shared-files")).to_contain_text("Ask for the dates, quote in euros.")
    expect(page.locator("#er-shared-files .er-also").first).to_contain_text("also stood on lesson of others")
    _fits(page, f"erasure-confirm{mode}", wide)
    shoot(page, f"console-erasure-confirm{mode}", full_page=True)
    preview = {
        row.locator("td").first.inner_text(): int(row.locator("td").last.inner_text())
        for row in page.locator("#er-plan tbody tr").all()
    }
    if not dark:
        page.click("#er-confirm")
        page.wait_for_selector(".messagelist")
        seeded["preview"] = preview
    # §17: running a blocked erasure again shows fresh counts and the hold first.
    page.goto(f"{live_server.url}/admin/governance/erasurerequest/{seeded['blocked'].pk}/change/")
    page.click("#er-retry")
    expect(page.locator("#confirm-warning")).to_contain_text(f"#{seeded['hold'].pk} still in force")
    _fits(page, f"erasure-retry{mode}", wide)
    shoot(page, f"console-erasure-retry{mode}")
    # §17: lifting a hold asks what it lets go, and why.
    page.goto(f"{live_server.url}/admin/memoryapp/legalhold/")
    page.locator(f'#result_list input.action-select[value="{seeded["hold"].pk}"]').check()
    page.select_option("select[name=action]", "lift")
    page.click("button[name=index]")
    expect(page.locator("#consequences")).to_contain_text("erasure requests they stopped")
    _fits(page, f"hold-lift{mode}", wide)
    shoot(page, f"console-hold-lift{mode}")
    if not dark:
        page.fill("#id_reason", "The case settled on 1 May.")
        page.click("#confirm")
        expect(page.locator(".messagelist")).to_contain_text("1 hold lifted")
    page.close()


def _operator_pages(
    browser: Any, live_server: Any, seeded: dict[str, Any], *, dark: bool, wide: dict[str, Any]
) -> None:
    mode = "-dark" if dark else ""
    page = log_in(browser, live_server, "olivia", then="/admin/memoryapp/agentkey/", dark=dark)
    # §17: revoking a key says what it stops first.
    page.locator(f'#result_list input.action-select[value="{seeded["revoked"].pk}"]').check()
    page.select_option("select[name=action]", "revoke")
    page.click("button[name=index]")
    expect(page.locator("#consequences")).to_contain_text("k0001")
    _fits(page, f"key-revoke{mode}", wide)
    shoot(page, f"console-key-revoke{mode}")
    if not dark:
        page.click("#confirm")
        expect(page.locator(".messagelist")).to_contain_text("Revoked 1 key")
    # §17: the prune offers a dry run only; its report carries the confirmation.
    page.goto(f"{live_server.url}/admin/memoryapp/retentionpolicy/prune/")
    expect(page.locator("#prune-run")).to_have_count(0)
    page.select_option("#prune-agent", "bob")
    page.click("#prune-dry")
    expect(page.locator("#prune-run")).to_have_value(re.compile(r"^Yes, run the prune for bob \(\d+ rows now\)$"))
    _fits(page, f"prune{mode}", wide)
    shoot(page, f"console-prune-dry{mode}", full_page=True)
    if not dark:
        page.click("#prune-run")
        page.wait_for_selector("#run-title")
    page.close()


def test_the_console_points_of_issue_23_in_a_browser_light_and_dark(
    django_db_setup: Any, live_server: Any, transactional_db: Any, chromium: Callable[[], Any]
) -> None:
    seeded = _seed()
    wide: dict[str, Any] = {}
    with chromium() as browser:
        for dark in (True, False):
            _reviewer_pages(browser, live_server, seeded, dark=dark, wide=wide)
            _officer_pages(browser, live_server, seeded, dark=dark, wide=wide)
            _operator_pages(browser, live_server, seeded, dark=dark, wide=wide)
    assert wide == {}, f"pages wider than the window: {wide}"

    request = ErasureRequest.objects.get(user_id="u-dan")
    assert request.status == "done"
    # The rule stood in the agent-wide playbook and in every draft drafted on it since: each one counted.
    assert seeded["preview"]["playbook rules removed"] == request.counts["playbook_rules"] == 1 + ROWS // 2
    assert seeded["preview"]["job runs naming them (scrubbed)"] == request.counts["job_runs"]
    assert not Thread.objects.filter(user_id="u-dan").exists()
    hold = LegalHold.objects.get(pk=seeded["hold"].pk)
    assert hold.lifted_at is not None
    assert AuditRecord.objects.get(action="legal_hold.lifted").details["reason"] == "The case settled on 1 May."
    assert AgentKey.objects.get(pk=seeded["revoked"].pk).revoked_at is not None
    assert JobRun.objects.filter(kind=PRUNE_JOB_KIND).count() == 1
    assert MemoryItem.objects.filter(agent=seeded["alice"]).exists()
