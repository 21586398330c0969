"""A reviewer promotes a playbook draft after reading its diff, in a real headless Chromium.

The reviewer logs in, opens the drafts waiting, reads the draft beside the playbook (the rule it
adds, the lesson it names and the quote that lesson stands on, linked to the conversation), and
promotes it; the playbook then holds the draft's rules and the audit trail says who promoted it.
Screenshots (1280x800) go to bench/out/screenshots/.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from governance.models import AuditRecord
from memoryapp.consolidation.dedupe import scope_dedupe
from memoryapp.consolidation.fold import (
    PLAYBOOK_DRAFT_PATH,
    PLAYBOOK_PATH,
    parse_playbook,
    playbook_file,
    playbook_fold,
)
from memoryapp.consolidation.observations import observations_refresh
from memoryapp.items.rules import Scope
from memoryapp.llm.port import use_model
from memoryapp.models import MemoryFileVersion, MemoryItem
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user
from tests.kit.consolidation import active_item, answers, scripted
from tests.kit.factories import (
    AgentFactory,
    EntryFactory,
    MemoryFileVersionFactory,
    MemoryItemFactory,
    ThreadFactory,
)

pytestmark = BROWSER_TEST


def _seed() -> dict[str, str]:
    """Agent concierge, Ana's thread with a lesson she taught, a playbook of two rules, a draft adding one."""
    agent = AgentFactory(slug="concierge")
    thread = ThreadFactory(agent=agent, external_id="t-lisbon")
    EntryFactory(thread=thread, role="assistant", content="I found three hotels in Lisbon for you.")
    said = EntryFactory(
        thread=thread,
        role="user",
        content="Before you search, always ask me the travel dates first, it saves us both time.",
    )
    lesson = MemoryItemFactory(
        agent=agent,
        kind="lesson",
        subject="hotel search",
        attribute="dates first",
        value="Ask for the travel dates before searching hotels",
        trust="user",
        evidence=[{"entry_id": said.id, "quote": "always ask me the travel dates first"}],
    )
    MemoryFileVersionFactory(
        agent=agent,
        user_id="u-ana",
        path=PLAYBOOK_PATH,
        content=playbook_file(["Answer in short bullet points.", "Quote prices in euros."]),
        author="user",
    )
    rule = f"Ask for the travel dates before searching hotels. [lesson:{lesson.pk}]"
    with use_model(scripted(answers({"op": "add", "rule": rule}))):
        playbook_fold(agent=agent, scope=Scope(user_id="u-ana"))
    draft = MemoryFileVersion.objects.get(agent=agent, path=PLAYBOOK_DRAFT_PATH)
    return {"draft": draft.pk, "lesson": lesson.pk, "rule": rule, "entry": said.id, "thread": str(said.thread_id)}


@pytest.fixture
def reviewer(transactional_db: None) -> User:
    return staff_user("rita", role="reviewer")


def test_a_reviewer_promotes_a_playbook_draft_after_reading_its_diff(django_db_setup, live_server, reviewer, chromium):
    seeded = _seed()
    with chromium() as browser:
        page = log_in(browser, live_server, "rita", then="/admin/memoryapp/playbookdraft/", wait_for="#pd-drafts")
        expect(page.locator("#pd-drafts tbody tr")).to_have_count(1)
        shoot(page, "playbook-drafts")

        page.click("#pd-drafts a.button")
        page.wait_for_selector("#pd-side")
        added = page.locator("#pd-side tr.added")
        expect(added).to_have_count(1)
        expect(added.locator("td.right")).to_have_text(f"- {seeded['rule']}")
        expect(page.locator("#pd-side tr.same td.left", has_text="Quote prices in euros.")).to_have_count(1)
        change = page.locator("#change-1")
        expect(change.locator(".pd-kind")).to_have_text("added")
        expect(change.locator("mark")).to_have_text("always ask me the travel dates first")
        expect(change.locator(".pd-quote a")).to_have_attribute(
            "href", f"/admin/memoryapp/thread/{seeded['thread']}/change/#{seeded['entry']}"
        )
        expect(change.locator(".pd-lesson > a")).to_have_attribute(
            "href", f"/admin/memoryapp/memoryitem/{seeded['lesson']}/change/"
        )
        shoot(page, "playbook-draft-diff")

        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#pd-promote")
        expect(page.locator(".messagelist .success")).to_contain_text("Promoted")
        expect(page.locator("#pd-none")).to_be_visible()
        shoot(page, "playbook-promoted")

    playbook = MemoryFileVersion.objects.filter(path=PLAYBOOK_PATH).order_by("-sequence").first()
    assert playbook is not None and parse_playbook(playbook.content) == [
        "Answer in short bullet points.",
        "Quote prices in euros.",
        seeded["rule"],
    ]
    record = AuditRecord.objects.get(action="playbook.promoted")
    assert (record.actor, record.details["draft_version"]) == ("staff:rita", seeded["draft"])
    assert re.fullmatch(r"mfv_\w+", playbook.pk)


def test_a_reviewer_undoes_a_stale_mark_and_reads_an_entity_page(django_db_setup, live_server, reviewer, chromium):
    agent = AgentFactory(slug="concierge")
    facts = [
        active_item(agent=agent, subject="Ana", attribute=a, value=v)
        for a, v in (("diet", "vegetarian"), ("food", "vegetarian, no meat"), ("allergy", "peanuts"), ("city", "Porto"))
    ]
    with use_model(scripted(answers({"keep": facts[0].pk, "drop": [facts[1].pk], "reason": "duplicate"}))):
        scope_dedupe(agent=agent, scope=Scope(user_id="u-ana"))
    held = [facts[0], facts[2], facts[3]]
    statement = "Ana needs meals without meat or peanuts. " + " ".join(f"[item:{i.pk}]" for i in held)
    with use_model(scripted(answers({"text": statement}))):
        observations_refresh(agent=agent, scope=Scope(user_id="u-ana"))
    entity_id = facts[0].entity_id
    with chromium() as browser:
        page = log_in(browser, live_server, "rita", then="/admin/memoryapp/staleitem/")
        # the value marked stale leads to its item (the id on hover)
        row = page.locator("#result_list tbody tr", has=page.locator(f"a[title='{facts[1].pk}']"))
        expect(row).to_contain_text("repeats the item kept")
        shoot(page, "stale-items")
        row.locator("input.action-select").check()
        page.select_option("select[name=action]", "undo_stale")
        page.click("button[name=index]")
        expect(page.locator(".messagelist li")).to_contain_text("1 item(s) active again")

        page.goto(f"{live_server.url}/admin/memoryapp/entityoverview/{entity_id}/change/")
        expect(page.locator(".ep-observation li")).to_contain_text("Ana needs meals without meat or peanuts.")
        expect(page.locator("#ep-items tbody tr")).to_have_count(4)
        shoot(page, "entity-page")
    assert MemoryItem.objects.get(pk=facts[1].pk).status == "active"
