"""The review flow in a real headless Chromium (Debian's package, driven by Playwright).

A reviewer logs into the admin, opens the queue, sees a quote highlighted in its conversation,
approves one item from the keyboard and rejects another with a reason, and the database and the
audit trail say so. Screenshots of the queue go to bench/out/screenshots/ (review-flow-*.png).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from governance.models import AuditRecord
from memoryapp.models import MemoryItem
from tests.kit.browser import BROWSER_TEST, PASSWORD, has_class, log_in, shoot
from tests.kit.factories import AgentFactory, EntryFactory, MemoryItemFactory, StaffFactory, ThreadFactory

pytestmark = BROWSER_TEST

# (person, assistant question, user answer, kind, attribute, value, quote)
TALKS = [
    (
        "u-ana",
        "Anything I should know about your food?",
        "I stopped eating meat last spring, I am vegetarian now.",
        "preference",
        "diet",
        "vegetarian",
        "I am vegetarian now",
    ),
    (
        "u-ana",
        "Where are you based these days?",
        "We moved to Porto in January, near the river.",
        "fact",
        "city",
        "Porto",
        "We moved to Porto in January",
    ),
    (
        "u-ana",
        "How should I write to you?",
        "Keep answers short please, bullet points are best.",
        "instruction",
        "answer style",
        "short answers, bullet points",
        "Keep answers short please",
    ),
    (
        "u-ana",
        "Any allergies?",
        "Peanuts. Even a trace sends me to hospital.",
        "fact",
        "allergy",
        "peanuts (severe)",
        "Even a trace sends me to hospital",
    ),
    (
        "u-ben",
        "What do you do for work?",
        "I teach maths at a secondary school in Leeds.",
        "fact",
        "job",
        "maths teacher",
        "I teach maths at a secondary school",
    ),
    (
        "u-ben",
        "Tea or coffee?",
        "Coffee, black, two cups before nine.",
        "preference",
        "drink",
        "black coffee",
        "Coffee, black",
    ),
    (
        "u-ben",
        "How did the trip go?",
        "Lisbon was lovely but the hotel was noisy.",
        "opinion",
        "Lisbon",
        "lovely, hotel noisy",
        "Lisbon was lovely",
    ),
]


def _seed() -> dict[str, str]:
    concierge, coach = AgentFactory(slug="concierge"), AgentFactory(slug="coach")
    ids: dict[str, str] = {}
    for n, (person, question, answer, kind, attribute, value, quote) in enumerate(TALKS):
        agent = concierge if person == "u-ana" else coach
        thread = ThreadFactory(agent=agent, external_id=f"t-{person}-{n}", user_id=person)
        EntryFactory(thread=thread, role="assistant", content=question)
        said = EntryFactory(thread=thread, role="user", content=answer)
        EntryFactory(thread=thread, role="assistant", content="Thanks, noted.")
        item = MemoryItemFactory(
            agent=agent,
            kind=kind,
            subject="Ana" if person == "u-ana" else "Ben",
            attribute=attribute,
            value=value,
            trust="model",
            user_id=person,
            confidence=0.8,
            evidence=[{"entry_id": said.id, "quote": quote}],
        )
        ids[attribute] = item.pk
    return ids


@pytest.fixture
def reviewer(transactional_db: None) -> User:
    return StaffFactory(username="rita", password=PASSWORD, permissions=("change_memoryitem", "view_memoryitem"))


def test_a_reviewer_approves_and_rejects_from_the_queue_in_a_browser(django_db_setup, live_server, reviewer, chromium):
    # django_db_setup first: the test database then outlives the live server's connection at teardown.
    ids = _seed()
    # Read everything the page is checked against now: inside Playwright's block the ORM would open
    # a connection of its own (its event loop gives that code another context) and leave it open.
    source_link = f"/admin/memoryapp/thread/{_thread_pk('diet')}/change/#{_entry_id(ids['diet'])}"
    with chromium() as browser:
        page = log_in(browser, live_server, "rita", then="/admin/memoryapp/memoryitem/review/", wait_for=".rq-card")

        diet = page.locator(f"#card-{ids['diet']}")
        expect(diet.locator("mark")).to_have_text("I am vegetarian now")
        expect(diet.locator(".rq-ctx").first).to_contain_text("Anything I should know about your food?")
        expect(diet.locator(".rq-where a")).to_have_attribute("href", source_link)
        shoot(page, "review-flow")

        # approve from the keyboard: pick the card, press a
        diet.locator(".rq-slot").click()
        page.keyboard.press("a")
        expect(diet).to_have_class(has_class("rq-done"))
        expect(diet.locator(".rq-result")).to_have_text("Approved.")

        # reject with a reason: r focuses the reason, Enter rejects
        city = page.locator(f"#card-{ids['city']}")
        city.locator(".rq-slot").click()
        page.keyboard.press("r")
        expect(city.locator("input[name=reason]")).to_be_focused()
        page.keyboard.type("not about this person")
        page.keyboard.press("Enter")
        expect(city).to_have_class(has_class("rq-rejected"))
        expect(page.locator("#rq-left")).to_have_text(str(len(TALKS) - 2))
        shoot(page, "review-flow-decided")

    assert MemoryItem.objects.get(pk=ids["diet"]).status == "active"
    rejected = MemoryItem.objects.get(pk=ids["city"])
    assert (rejected.status, rejected.metadata["rejected_because"]) == ("rejected", "not about this person")
    assert MemoryItem.objects.filter(status="suggested").count() == len(TALKS) - 2
    audit = {r.subject: (r.actor, r.outcome) for r in AuditRecord.objects.filter(action="item.reviewed")}
    assert audit == {ids["diet"]: ("staff:rita", "approved"), ids["city"]: ("staff:rita", "rejected")}


def _thread_pk(attribute: str) -> int:
    item = MemoryItem.objects.get(attribute=attribute)
    return item.evidence.get().entry.thread_id


def _entry_id(item_id: str) -> str:
    return MemoryItem.objects.get(pk=item_id).evidence.get().entry_id
