"""The newest staff pages filled to real sizes, in a real headless Chromium, as their users read them:
a person known to five agents with 200 identifiers (a privacy officer and a reviewer), a review
queue of suggestions quoting long ranges of memory files and tool calls with long ids, and 150
knowledge documents with long names. Each page must stay readable (folded, cut, paged: nothing
wider than the window) and ask the database as many questions at size as with a few rows.

Screenshots (1,280 x 800) go to bench/out/screenshots/*-at-size.png."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

from playwright.sync_api import expect

from governance.erasure.admin import SHARED_ROWS_SHOWN
from governance.models import ErasureRequest
from memoryapp.admin.review import FILE_CONTEXT_LINES, RANGE_LINES_SHOWN, TOOL_CALL_ID_SHOWN
from memoryapp.files.access import FileAccess
from memoryapp.files.protocol import file_create
from memoryapp.items.services import item_write
from memoryapp.models import Agent, Entry, KnowledgeDocument, MemoryFileVersion, MemoryItem, PersonIdentifier
from memoryapp.screening.identifiers import identifiers_set
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.browser import BROWSER_TEST, log_in, page_queries, shoot, staff_user, too_wide

pytestmark = BROWSER_TEST

PERSON = "u-ines"


def _wider_than_boxes(page: Any) -> list[Any]:
    """`too_wide`, but for the lists' text boxes: one value a line, a long one scrolls sideways inside
    its box (it is not broken over two lines, which would read as two values)."""
    return [found for found in too_wide(page) if found[0] != "textarea"]


def _grown(seed: Callable[[int], None], few: int, many: int, username: str, url: str) -> tuple[int, int]:
    """The page's queries with `few` rows seeded, then with `many` (seeded on top)."""
    seed(few)
    at_few = page_queries(username, url)
    seed(many)
    return at_few, page_queries(username, url)


# --- a person's page ------------------------------------------------------------------------------


def _identifiers_in(agents: int) -> None:
    """The person registered in `agents` agents, 40 identifiers each (10 of every kind, long ones)."""
    for a in range(agents):
        agent = Agent.objects.get_or_create(slug=f"customer-support-region-{a}-with-a-long-slug")[0]
        thread_create(agent=agent, external_id=f"t-ines-{a}", user_id=PERSON)
        identifiers_set(
            agent=agent,
            user_id=PERSON,
            body={
                "emails": [f"ines.valdomiro.{a}.{i}@accounts.a-long-subdomain.example.org" for i in range(10)],
                "phones": [f"+35191234{a}{i:03d}" for i in range(10)],
                "names": [f"ines valdomiro {chr(97 + i)}{a}" for i in range(10)],
                "external_ids": [f"crm-{a}-{i:06d}-" + "x" * 60 for i in range(10)],
            },
            actor="test",
        )


def test_a_person_known_to_five_agents_by_200_identifiers_reads_folded_per_agent(
    django_db_setup: Any, live_server: Any, chromium: Any
) -> None:
    staff_user("olga", role="privacy")
    staff_user("rita", role="reviewer")
    url = f"/admin/person/?{urlencode({'id': PERSON})}"
    officer_few, officer_many = _grown(_identifiers_in, 1, 5, "olga", url)
    assert PersonIdentifier.objects.filter(user_id=PERSON).count() == 200
    # The values of every agent are opened in one query, not one an agent.
    assert officer_many == officer_few, (officer_few, officer_many)
    assert page_queries("rita", url) < officer_many
    wide: dict[str, Any] = {}
    with chromium() as browser:
        page = log_in(browser, live_server, "olga", then=quote(url, safe=""), wait_for="#person-identifiers")
        blocks = page.locator("details.person-identifiers")
        expect(blocks).to_have_count(5)
        expect(page.locator("details.person-identifiers[open]")).to_have_count(0)
        expect(page.locator("#person-identifier-totals")).to_contain_text(
            "5 agents registered 50 e-mails · 50 phones · 50 names · 50 external ids in all"
        )
        # Folded, the table of what each agent holds is in the first screen and a half, not past 20 boxes.
        table = page.locator("#person-holdings").bounding_box()
        assert table is not None and table["y"] < 1.5 * 800
        if found := _wider_than_boxes(page):
            wide["officer folded"] = found
        shoot(page, "person-identifiers-at-size-officer")
        first = blocks.first
        first.locator("summary").click()
        emails = first.locator('textarea[name="emails"]')
        expect(emails).to_be_visible()
        assert emails.input_value().count("\n") == 9 and emails.get_attribute("rows") == "11"
        # One value a line: a long e-mail scrolls sideways in its box, it does not break over two lines.
        assert emails.evaluate("e => getComputedStyle(e).whiteSpace") == "pre"
        if found := _wider_than_boxes(page):
            wide["officer open"] = found
        first.scroll_into_view_if_needed()
        shoot(page, "person-identifiers-at-size-officer-open")

        page = log_in(browser, live_server, "rita", then=quote(url, safe=""), wait_for="#person-identifiers")
        text = page.locator("#content").inner_text()
        assert text.count("10 e-mails · 10 phones · 10 names · 10 external ids") == 5
        assert "ines.valdomiro" not in text and page.locator("textarea").count() == 0
        if found := too_wide(page):
            wide["reviewer"] = found
        shoot(page, "person-identifiers-at-size-reviewer")
    assert wide == {}, f"pages wider than the window: {wide}"


# --- the review queue -----------------------------------------------------------------------------

CALL_ID = "toolu_" + "0123456789abcdef" * 7  # 118 characters: clients' ids run to 200
NOTES = "\n".join(f"line {n}: prefers the window seat on flights over {n} minutes" for n in range(1, 501))


def _suggestions(n: int) -> None:
    """Up to `n` suggestions of the agent `concierge`, each quoting 200 lines of a memory file and a
    tool call's result in a long thread."""
    agent = Agent.objects.get_or_create(slug="concierge")[0]
    thread = thread_create(agent=agent, external_id="t-long", user_id="u-ana") if n else None
    version = MemoryFileVersion.objects.filter(agent=agent, path="/memories/ana.md").first()
    if version is None:
        file_create(access=FileAccess(agent=agent, user_id="u-ana"), path="/memories/ana.md", file_text=NOTES)
        version = MemoryFileVersion.objects.get(agent=agent, path="/memories/ana.md")
    for i in range(MemoryItem.objects.filter(agent=agent).count(), n):
        assert thread is not None
        entry_add(thread=thread, role="user", content=f"turn {i}: book me the usual seat")
        call = f"{CALL_ID}{i:04d}"
        entry_add(thread=thread, role="assistant", content="", tool_calls=[{"id": call, "name": "seat_map"}])
        result = entry_add(thread=thread, type="tool_result", tool_call_id=call, content=f"row {i}: seat 3A (window)")
        item_write(
            agent=agent,
            kind="preference",
            subject="Ana",
            attribute=f"seat {i}",
            value=f"window seat, row {i}",
            trust="model",
            user_id="u-ana",
            evidence=[
                {"entry_id": result.id, "tool_call_id": call, "quote": "seat 3A (window)"},
                {
                    "file_range": {"version_id": version.pk, "start_line": 100 + i, "end_line": 299 + i},
                    "quote": "prefers the window seat",
                },
            ],
        )


def test_a_review_queue_of_suggestions_quoting_200_file_lines_shows_each_range_folded(
    django_db_setup: Any, live_server: Any, chromium: Any
) -> None:
    staff_user("rita", role="reviewer")
    url = "/admin/memoryapp/memoryitem/review/"
    few, many = _grown(_suggestions, 5, 60, "rita", url)
    assert many == few, (few, many)
    wide: list[Any] = []
    with chromium() as browser:
        page = log_in(browser, live_server, "rita", then=url, wait_for=".rq-card")
        expect(page.locator(".rq-card")).to_have_count(50)  # a page of the 60
        files = page.locator(".rq-card .rq-file")
        expect(files).to_have_count(50)
        most = RANGE_LINES_SHOWN + 2 * FILE_CONTEXT_LINES
        assert page.locator(".rq-card .rq-file .rq-line").count() == 50 * most
        first = files.first
        expect(first.locator(".rq-fold")).to_have_text(f"… {200 - RANGE_LINES_SHOWN} lines not shown …")
        expect(first.locator(".rq-line.rq-quoted")).to_have_count(RANGE_LINES_SHOWN)
        expect(first.locator(".rq-line").first).to_have_attribute("data-line", str(100 - FILE_CONTEXT_LINES))
        expect(first.locator(".rq-line").last).to_have_attribute("data-line", str(299 + FILE_CONTEXT_LINES))
        call = page.locator(".rq-card .rq-tool .rq-call code").first
        assert len(call.inner_text()) <= TOOL_CALL_ID_SHOWN and call.get_attribute("title") == f"{CALL_ID}0000"
        wide = too_wide(page)
        first.scroll_into_view_if_needed()
        shoot(page, "review-queue-at-size")
    assert wide == [], wide


# --- knowledge documents --------------------------------------------------------------------------


def _documents(n: int) -> None:
    """`n` knowledge documents in all, across three agents, names up to 200 characters."""
    agents = [Agent.objects.get_or_create(slug=f"kb-agent-{a}")[0] for a in range(3)]
    have = KnowledgeDocument.objects.count()
    KnowledgeDocument.objects.bulk_create(
        KnowledgeDocument(
            agent=agents[i % 3],
            project_id=f"project-{i % 7}-" + "p" * 40 if i % 2 else "",
            name=f"Refund policy {i:03d} for the region, " + "with the exceptions agreed in writing " * (i % 5),
            content="Refunds within 30 days. " * 40,
            sha256="0" * 64,
            chunk_count=1 + i % 9,
            added_by="staff:someone-with-a-long-user-name",
        )
        for i in range(have, n)
    )


def test_150_knowledge_documents_list_one_line_each_paged(
    django_db_setup: Any, live_server: Any, chromium: Any
) -> None:
    staff_user("sam", superuser=True)
    url = "/admin/memoryapp/knowledgedocument/"
    few, many = _grown(_documents, 10, 150, "sam", url)
    assert many == few, (few, many)
    with chromium() as browser:
        page = log_in(browser, live_server, "sam", then=url, wait_for="#result_list")
        shoot(page, "knowledge-documents-at-size")
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(100)
        expect(page.locator(".paginator")).to_contain_text("150")
        heights = rows.evaluate_all("rows => rows.map(r => r.getBoundingClientRect().height)")
        assert max(heights) < 2 * min(heights), (min(heights), max(heights))  # no name wraps into a tall row
        name = rows.first.locator(".field-name_shown .cell-text")
        assert (name.get_attribute("title", timeout=1000) or "").startswith("Refund policy")
        wide = too_wide(page)
    assert wide == [], wide


# --- the erasure's confirm step -------------------------------------------------------------------


def _quoted_by_others(n: int) -> None:
    """The person said 20 things in their thread; up to `n` items of 30 other people stand on them,
    and the person is named in 30 other people's threads (by the name and e-mail registered)."""
    agent, made = Agent.objects.get_or_create(slug="concierge")
    if made:
        identifiers_set(
            agent=agent,
            user_id=PERSON,
            body={"emails": ["ines.valdomiro@example.org"], "names": ["Inês Valdomiro"]},
            actor="test",
        )
        mine = thread_create(agent=agent, external_id="t-ines", user_id=PERSON)
        for i in range(20):
            entry_add(thread=mine, role="user", content=f"note {i}: I like quiet rooms away from the lift")
        for t in range(30):
            other = thread_create(agent=agent, external_id=f"t-other-{t}-" + "z" * 80, user_id=f"u-other-{t}")
            entry_add(thread=other, role="user", content=f"Inês Valdomiro (ines.valdomiro@example.org) says hi {t}")
    said = list(Entry.objects.filter(thread__external_id="t-ines").order_by("seq"))
    for i in range(MemoryItem.objects.filter(agent=agent).count(), n):
        item_write(
            agent=agent,
            kind="fact",
            subject="hotel",
            attribute=f"rooms {i}",
            value=f"quiet rooms, floor {i}",
            trust="model",
            user_id=f"u-other-{i % 30}",
            evidence=[{"entry_id": said[i % 20].id, "quote": "I like quiet rooms"}],
        )


def test_an_erasure_quoted_under_100_items_of_others_confirms_with_the_list_cut_and_the_groups_in_view(
    django_db_setup: Any, live_server: Any, chromium: Any, tmp_path: Any, settings: Any
) -> None:
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    staff_user("pat", role="privacy")
    _quoted_by_others(100)
    with chromium() as browser:
        page = log_in(browser, live_server, "pat", then=f"/admin/governance/erasurerequest/add/?user_id={PERSON}")
        page.fill("#id_legal_basis", "GDPR Art. 17(1)(a)")
        page.click("#file-erasure")
        expect(page.locator("#er-plan")).to_contain_text("memory items purged")
        expect(page.locator("#er-shared-items-count")).to_contain_text(
            "stood on the person's words: 100 (100 purged, 0 trimmed) in 30 scopes; the first 25"
        )
        expect(page.locator("#er-shared-items tbody tr")).to_have_count(SHARED_ROWS_SHOWN)
        expect(page.locator("#er-shared-items-more")).to_contain_text("… and 75 more items")
        group = page.locator("#er-mentions-groups tbody tr")
        expect(group).to_have_count(1)
        expect(group.locator("td").nth(2)).to_have_text("30")  # redacted
        assert group.locator("code").count() == 3  # examples, three at the most
        # The choice for the group and the button are within reach, not past a hundred rows.
        button = page.locator("#er-confirm").bounding_box()
        assert button is not None and button["y"] < 4 * 800, button
        # A group's name is read on a few lines, not a word a line beside the other columns.
        label = group.locator("td").first.bounding_box()
        assert label is not None and label["height"] < 70, label
        wide = too_wide(page)
        page.locator("#er-mentions").scroll_into_view_if_needed()
        shoot(page, "erasure-confirm-at-size")
        # Kept, for a reason: filed with the exclusion.
        kept = (group.get_attribute("id") or "").removeprefix("er-mentions-")
        group.locator("select").select_option("legal_obligation")
        page.click("#er-confirm")
        expect(page.locator(".messagelist")).to_contain_text("filed")
    assert wide == [], wide
    assert ErasureRequest.objects.get(user_id=PERSON).excluded == {kept: "legal_obligation"}
