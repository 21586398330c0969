"""The item list with encryption at rest on, at real size, in a real headless Chromium: 120 items of
two agents whose subjects and metadata are sealed (issue 25 §6). A reviewer must read every subject
in clear (never a sealed value), find an item by its whole subject in any case, and not be offered a
sort that would order ciphertext; the page asks the database as many questions at 120 rows as at 6.

Screenshot (1,280 x 800): bench/out/screenshots/item-list-encrypted.png."""

from __future__ import annotations

from typing import Any

from django.db import connection
from playwright.sync_api import expect

from memoryapp.items.services import item_write
from memoryapp.models import Agent, MemoryItem
from tests.kit.browser import BROWSER_TEST, log_in, page_queries, shoot, staff_user, too_wide
from tests.kit.crypto import encrypted  # noqa: F401 (a fixture)

pytestmark = BROWSER_TEST

LIST = "/admin/memoryapp/memoryitem/"
SUBJECTS = ("Inês Valdomiro", "the hotel in Lisbon", "Ana's daughter", "Café Central", "Project Atlas")


def _items(agents: list[Agent], start: int, stop: int) -> None:
    for i in range(start, stop):
        item_write(
            agent=agents[i % len(agents)],
            kind="fact",
            subject=SUBJECTS[i % len(SUBJECTS)],
            attribute=f"detail {i}",
            value=f"a value worth keeping, number {i}, with enough words to be cut in the list",
            trust="model",
            user_id=f"u-person-{i % 7}",
            metadata={"source": f"note {i}"},
        )


def _stored_subject(pk: Any) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT subject FROM memoryapp_memoryitem WHERE id = %s", [pk])
        return str(cursor.fetchone()[0])


def test_a_reviewer_reads_120_sealed_items_in_clear_and_finds_one_by_its_subject_in_any_case(
    encrypted: Any,  # noqa: F811 (the fixture imported above)
    django_db_setup: Any,
    live_server: Any,
    chromium: Any,
) -> None:
    agents = [Agent.objects.create(slug="concierge-encrypted"), Agent.objects.create(slug="support-encrypted")]
    staff_user("rita", role="reviewer")
    _items(agents, 0, 6)
    at_few = page_queries("rita", LIST)
    _items(agents, 6, 120)
    at_many = page_queries("rita", LIST)
    assert at_many == at_few, f"the list asks {at_few} questions at 6 items and {at_many} at 120"

    sealed = MemoryItem.objects.filter(attribute="detail 0").values_list("pk", flat=True).first()
    stored = _stored_subject(sealed)
    assert "Inês" not in stored and "Valdomiro" not in stored, "the subject is not sealed at rest"

    with chromium() as browser:
        page = log_in(browser, live_server, "rita", then=LIST, wait_for="#result_list")
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(100)  # the admin's page size: 120 items over two pages
        cells = page.locator("#result_list tbody td.field-slot").all_inner_texts()
        assert all(" · detail " in cell for cell in cells), cells[:5]
        assert {cell.split(" · ")[0] for cell in cells} <= set(SUBJECTS), "a subject reads sealed or cut"
        assert stored[:12] not in page.content(), "the sealed value reached the page"
        # The subject column does not offer a sort (it would order sealed values); the others do.
        expect(page.locator("#result_list thead th.column-slot")).not_to_have_class("sortable")
        expect(page.locator("#result_list thead th.column-slot a")).to_have_count(0)
        expect(page.locator("#result_list thead th.column-person.sortable")).to_have_count(1)
        assert not too_wide(page), too_wide(page)
        shoot(page, "item-list-encrypted")

        page.fill("#searchbar", "inês VALDOMIRO")
        page.press("#searchbar", "Enter")
        page.wait_for_selector("#result_list")
        found = page.locator("#result_list tbody td.field-slot").all_inner_texts()
        assert len(found) == 24 and all(cell.startswith("Inês Valdomiro · ") for cell in found), found[:3]

        # A part of the subject is not a whole subject: the keyed hash finds nothing for it.
        page.fill("#searchbar", "Valdomiro")
        page.press("#searchbar", "Enter")
        page.wait_for_load_state()
        expect(page.locator("#result_list tbody tr")).to_have_count(0)
        # The attribute stays searchable by a part of it.
        page.fill("#searchbar", "detail 11")
        page.press("#searchbar", "Enter")
        page.wait_for_selector("#result_list")
        expect(page.locator("#result_list tbody tr")).to_have_count(11)  # detail 11, 110..119
