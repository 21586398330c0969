"""The staff console's lists at 1,280 px in a real headless Chromium (Debian's, driven by Playwright),
light and dark, filled as a real service fills them: 60+ rows each, ids of 128 characters, person ids
an identity provider hands out, audit details of many counts, webhooks failing with long errors.

A list must show its key columns inside the window (the threads list's agent, person and entries;
the audit's details; a stale item's value and the value of the item kept; a webhook's failures and
last error), with no box scrolling sideways. Each list is photographed into
bench/out/screenshots/console-*.png.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from django.utils import timezone

from governance.audit.chain import AuditEntry, audit_append_many
from memoryapp.agents.services import agent_get_or_create
from memoryapp.items.services import STALE_BY_DEDUPE, StaleMark, items_mark_stale
from memoryapp.models import Webhook
from memoryapp.threads.services import thread_create
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user, too_wide
from tests.kit.factories import MemoryItemFactory
from tests.kit.governance_rows import long_person

pytestmark = BROWSER_TEST
ROWS = 64

# Each column header's right edge, the right edge of what the list's box shows (the window's, or less),
# and any box of the content scrolling sideways.
COLUMNS = """() => {
  const edges = {};
  const box = document.querySelector('#changelist .results') || document.documentElement;
  const width = Math.min(window.innerWidth, Math.round(box.getBoundingClientRect().right));
  for (const th of document.querySelectorAll('#result_list thead th')) {
    edges[th.innerText.trim().toLowerCase()] = Math.round(th.getBoundingClientRect().right);
  }
  const over = [];
  if (document.documentElement.scrollWidth > window.innerWidth)
    over.push(['page', document.documentElement.scrollWidth - window.innerWidth]);
  for (const el of document.querySelectorAll('#content *')) {
    const style = getComputedStyle(el);
    if (el.scrollWidth - el.clientWidth > 1 && el.clientWidth > 0 && ['auto', 'scroll'].includes(style.overflowX))
      over.push([el.tagName + '.' + el.className, el.scrollWidth - el.clientWidth]);
  }
  return {edges, over, width};
}"""

# The columns each list must show inside the window.
KEY_COLUMNS = {
    "threads": ("thread", "agent", "person", "entries written", "updated"),
    "audit": ("action", "subject", "outcome", "details"),
    "stale": ("value marked stale", "why", "value of the item kept", "subject · attribute"),
    "webhooks": ("url", "agent", "failures", "last error"),
}


def _fill() -> dict[str, str]:
    """64 of each row the four lists show, with the long ids and texts real services hand out."""
    agents = [agent_get_or_create(slug=f"customer-support-agent-{i:03d}-eu-west-production")[0] for i in range(3)]
    for n in range(ROWS):
        thread_create(
            agent=agents[n % 3],
            # a client-chosen id as long as the API takes (128 characters, no space to break at)
            external_id=(f"conversation-{n:04d}-" + "5f0c2a9e7b3d4c1e8a6f9b2d4e7c1a3f" * 4)[:128],
            user_id=long_person(n)[:128],
        )
    audit_append_many(
        [
            AuditEntry(
                action="erasure.completed",
                actor="staff:privacy-officer-with-a-long-name",
                agent_id=agents[n % 3].pk,
                thread_id=f"conversation-{n:04d}-" + "5f0c2a9e7b3d4c1e8a6f9b2d4e7c1a3f" * 3,
                subject=str(n + 1),
                outcome="done",
                details={
                    "branches_deleted": n % 3,
                    "entries_deleted": 120 + n,
                    "entries_redacted": 7,
                    "items_forgotten": 33,
                    "file_versions_redacted": 12,
                    "threads_deleted": 2,
                },
            )
            for n in range(ROWS)
        ]
    )
    marks = []
    for n in range(ROWS):
        kept = MemoryItemFactory(
            agent=agents[n % 3],
            subject=f"Ana Maria Pereira de Souza {n}",
            attribute="favourite places to travel to",
            value=f"the lighthouse by the harbour where her grandmother lived, kept {n} " * 2,
            user_id=long_person(n)[:128],
        )
        repeat = MemoryItemFactory(
            agent=agents[n % 3],
            subject=f"Ana Maria Pereira de Souza {n}",
            attribute="favourite places to travel to (again)",
            value=f"the old lighthouse near the harbour, where grandmother lived {n} " * 2,
            user_id=long_person(n)[:128],
        )
        marks.append(
            StaleMark(item_id=repeat.pk, because={"by": STALE_BY_DEDUPE, "reason": "duplicate", "kept": kept.pk})
        )
    items_mark_stale(marks=marks, actor="job:dedupe")
    Webhook.objects.bulk_create(
        Webhook(
            agent=agents[n % 3],
            url=f"https://hooks.internal.example-health-insurer.org/memory/events/{n:04d}/" + "a1b2c3d4" * 8,
            secret="s",
            failures=n % 7,
            last_error="refused: the receiver answered 503 Service Unavailable after 10 s (attempt 5 of 5)",
            last_failure_at=timezone.now(),
        )
        for n in range(ROWS)
    )
    return {
        "threads": "/admin/memoryapp/thread/",
        "audit": "/admin/governance/auditrecord/",
        "stale": "/admin/memoryapp/staleitem/",
        "webhooks": "/admin/memoryapp/webhook/",
    }


def test_the_console_lists_show_their_key_columns_at_1280_px_light_and_dark(
    django_db_setup: Any, live_server: Any, chromium: Any
) -> None:
    lists = _fill()
    staff_user("sam", superuser=True)
    hidden: dict[str, Any] = {}
    with chromium() as browser:
        for dark in (False, True):
            page = log_in(browser, live_server, "sam", dark=dark)
            for name, url in lists.items():
                answer = page.goto(f"{live_server.url}{url}")
                assert answer is not None and answer.status == 200, (name, answer and answer.status)
                shown = page.evaluate(COLUMNS)
                assert page.locator("#result_list tbody tr").count() >= 60, name
                out = [
                    column
                    for column in KEY_COLUMNS[name]
                    if column not in shown["edges"] or shown["edges"][column] > shown["width"]
                ]
                label = f"{name}{'-dark' if dark else ''}"
                if out or shown["over"]:
                    hidden[label] = {"out of the window": out, "scrolling": shown["over"], **shown["edges"]}
                shoot(page, f"console-{label}")
            if not dark:
                # the kept item's value is on the stale list, beside the value marked stale
                page.goto(f"{live_server.url}{lists['stale']}")
                assert "the lighthouse by the harbour" in page.locator("#result_list tbody tr").first.inner_text()
    assert hidden == {}, f"key columns out of the window at 1,280 px: {hidden}"


def test_an_operator_meets_no_dead_end_and_a_refused_page_says_why_light_and_dark(
    django_db_setup: Any, live_server: Any, chromium: Any
) -> None:
    from governance.models import JobRun

    lists = _fill()
    agent = agent_get_or_create(slug="customer-support-agent-000-eu-west-production")[0]
    JobRun.objects.create(kind="compaction", status="failed", task_name="", error="boom", agent_id=agent.pk)
    run = JobRun.objects.create(
        kind="extraction", status="failed", agent_id=agent.pk, arguments={"thread_id": "conversation-0000"}
    )
    staff_user("olav", role="operator")
    with chromium() as browser:
        for dark in (False, True):
            suffix = "-dark" if dark else ""
            page = log_in(browser, live_server, "olav", dark=dark)
            page.goto(f"{live_server.url}/admin/memoryapp/agent/{agent.pk}/change/")
            # every link of the agent's memory opens for an operator
            hrefs = page.locator(".field-memory_links a").evaluate_all("(links) => links.map((a) => a.href)")
            assert hrefs and all("/thread/" not in h and "/entry/" not in h for h in hrefs), hrefs
            for href in hrefs:
                answer = page.goto(href)
                assert answer is not None and answer.status == 200, href
            page.goto(f"{live_server.url}/admin/memoryapp/agent/{agent.pk}/change/")
            shoot(page, f"console-operator-agent{suffix}")
            page.goto(f"{live_server.url}/admin/governance/jobrun/{run.pk}/change/")
            assert page.locator("#content a[href*='/memoryapp/thread/']").count() == 0
            answer = page.goto(f"{live_server.url}{lists['threads']}")
            assert answer is not None and answer.status == 403
            assert "Reviewers, Privacy officers" in page.locator("#content").inner_text()
            # the admin's look: the header bar and the theme of the page
            assert page.locator("#header").is_visible()
            shoot(page, f"console-403{suffix}")


def test_a_privacy_officer_finds_a_person_and_reads_what_each_agent_holds_light_and_dark(
    django_db_setup: Any, live_server: Any, chromium: Any
) -> None:
    """From the start page's search box to the person's page: 40 agents with long slugs holding
    threads, items and facts about one person with a long id; the table fits the window."""
    from memoryapp.items.facts import fact_remember

    person = long_person(7)[:128]
    agents = [agent_get_or_create(slug=f"customer-support-agent-{i:03d}-eu-west-production")[0] for i in range(40)]
    for n in range(80):
        agent = agents[n % 40]
        thread_create(agent=agent, external_id=f"conversation-{n:04d}", user_id=person)
        MemoryItemFactory(agent=agent, user_id=person, attribute=f"likes {n}", value="the lighthouse")
    for agent in agents[:5]:
        fact_remember(agent=agent, namespace=f"users/{person}", key="tz", value="Europe/Lisbon")
    staff_user("olga", role="privacy")
    staff_user("rita", role="reviewer")
    wide: dict[str, Any] = {}
    with chromium() as browser:
        for dark in (False, True):
            suffix = "-dark" if dark else ""
            page = log_in(browser, live_server, "olga", dark=dark)
            page.fill("#find-person-id", person)
            page.press("#find-person-id", "Enter")
            page.wait_for_selector("#person-holdings")
            assert page.locator("#person-holdings tbody tr").count() == 40
            assert page.locator("#person-holdings tfoot").inner_text().split()[2:4] == ["80", "0"]
            if found := too_wide(page):
                wide[f"person{suffix}"] = found
            shoot(page, f"console-person{suffix}")
            # a count leads to its list, filtered to the agent and the person
            page.locator("#person-holdings tbody tr").first.locator("td a").nth(1).click()
            page.wait_for_selector("#result_list")
            assert page.locator("#result_list tbody tr").count() == 2
            # Erase opens the erasure form filled in
            page.go_back()
            page.click("#person-erase")
            page.wait_for_selector("#id_user_id")
            assert page.input_value("#id_user_id") == person
            # an id that matches nothing says so
            page.goto(f"{live_server.url}/admin/person/?id=nobody-at-all")
            assert page.locator("#person-nothing").is_visible()
            shoot(page, f"console-person-nothing{suffix}")
        page = log_in(browser, live_server, "rita", then=quote(f"/admin/person/?{urlencode({'id': person})}", safe=""))
        assert page.locator("#person-erase").count() == 0
        assert "memory file versions" not in page.locator("#person-holdings thead").inner_text().lower()
    assert wide == {}, f"pages wider than the window: {wide}"


# The contrast of an element's text on the background it is drawn on (WCAG 2: 1 to 21): translucent
# backgrounds (tints) laid over those beneath them, down to the first opaque one.
CONTRAST = """(selector) => {
  const el = document.querySelector(selector);
  const rgba = (c) => { const v = c.match(/[\\d.]+/g).map(Number); return v.length < 4 ? [...v, 1] : v; };
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const layers = [];
  for (let node = el; node; node = node.parentElement) {
    const c = rgba(getComputedStyle(node).backgroundColor);
    if (c[3] > 0) layers.push(c);
    if (c[3] >= 1) break;
  }
  let bg = [255, 255, 255];
  for (const [r, g, b, a] of layers.reverse()) bg = [r * a + bg[0] * (1 - a), g * a + bg[1] * (1 - a), b * a + bg[2] * (1 - a)];
  const fg = rgba(getComputedStyle(el).color);
  const text = [0, 1, 2].map((i) => fg[i] * fg[3] + bg[i] * (1 - fg[3]));
  const a = lum(text), b = lum(bg);
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


def test_the_playbook_diff_keeps_its_contrast_in_light_and_dark_mode(
    django_db_setup: Any, live_server: Any, chromium: Any
) -> None:
    from memoryapp.consolidation.fold import PLAYBOOK_DRAFT_PATH, PLAYBOOK_PATH, playbook_file, playbook_fold
    from memoryapp.items.rules import Scope
    from memoryapp.llm.port import use_model
    from memoryapp.models import MemoryFileVersion
    from tests.kit.consolidation import answers, scripted
    from tests.kit.factories import EntryFactory, MemoryFileVersionFactory, ThreadFactory

    agent = agent_get_or_create(slug="concierge")[0]
    thread = ThreadFactory(agent=agent, external_id="t-lisbon")
    said = EntryFactory(thread=thread, role="user", content="Before you search, always ask me the travel dates first.")
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
        content=playbook_file(["Quote prices in euros."]),
        author="user",
    )
    rule = f"Ask for the travel dates before searching hotels. [lesson:{lesson.pk}]"
    with use_model(scripted(answers({"op": "add", "rule": rule}))):
        playbook_fold(agent=agent, scope=Scope(user_id="u-ana"))
    draft = MemoryFileVersion.objects.get(agent=agent, path=PLAYBOOK_DRAFT_PATH)
    staff_user("rita", role="reviewer")
    url = f"/admin/memoryapp/playbookdraft/{draft.pk}/change/"
    measured: dict[str, dict[str, float]] = {}
    with chromium() as browser:
        # the system's dark mode, the admin's own dark theme on a light system, and light
        for label, dark, theme in (("light", False, None), ("dark", True, None), ("theme-dark", False, "dark")):
            page = log_in(browser, live_server, "rita", dark=dark)
            if theme:
                page.evaluate(f"localStorage.setItem('theme', '{theme}')")
            page.goto(f"{live_server.url}{url}")
            page.wait_for_selector("#pd-side tr.added")
            measured[label] = {
                selector: round(page.evaluate(CONTRAST, selector), 2)
                for selector in ("#pd-side tr.added td.right", ".pd-kind.added", ".pd-quote mark")
            }
            shoot(page, f"console-playbook-diff-{label}")
    low = {label: {s: c for s, c in found.items() if c < 4.5} for label, found in measured.items()}
    assert all(not found for found in low.values()), f"text under 4.5:1 on the diff's colours: {measured}"
