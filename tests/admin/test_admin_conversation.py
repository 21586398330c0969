"""A thread's admin page read as a conversation: one branch in order, the others folded where they
grow out, forks linked both ways, tools, summaries and redactions drawn as such, quotes marked, a
linked turn anchored, and pages along the branch whose cost does not grow with the thread."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from memoryapp.forgetting.services import entry_redact
from memoryapp.items.services import item_write
from memoryapp.models import Entry, Thread
from memoryapp.threads.services import entry_add, thread_create, thread_fork
from tests.kit.api import Caller
from tests.kit.locomo_threads import locomo_thread

pytestmark = pytest.mark.django_db


def page_of(client: Client, thread: Thread, **params: str) -> str:
    response = client.get(f"/admin/memoryapp/thread/{thread.pk}/change/", params)
    assert response.status_code == 200, response.content.decode()[:500]
    return response.content.decode()


def turn_ids(page: str) -> list[str]:
    return re.findall(r'<li class="cv-turn[^"]*"\s+id="entry-([^"]+)"', page)


def turn_classes(page: str) -> dict[str, str]:
    return {
        entry_id: classes for classes, entry_id in re.findall(r'<li class="cv-turn([^"]*)"\s+id="entry-([^"]+)"', page)
    }


def rome(caller: Caller) -> tuple[Thread, dict[str, Entry]]:
    thread = thread_create(agent=caller.agent, external_id="rome", user_id="u-ana")
    q = entry_add(thread=thread, role="user", content="Plan a day in Rome")
    colosseum = entry_add(thread=thread, role="assistant", content="Start at the Colosseum")
    vatican = entry_add(thread=thread, role="assistant", content="Start at the Vatican", parent_id=q.id, activate=False)
    more = entry_add(thread=thread, role="user", content="And lunch?", parent_id=vatican.id, activate=False)
    return thread, {"q": q, "colosseum": colosseum, "vatican": vatican, "more": more}


def staff(name: str, *groups: str) -> Client:
    user = User.objects.create_user(name, password="not-used", is_staff=True)
    user.groups.set(Group.objects.filter(name__in=groups))
    client = Client()
    client.force_login(user)
    return client


def test_the_thread_page_shows_the_active_branch_in_order_and_folds_the_other_at_its_branch_point(
    admin_client: Client, alice: Caller
) -> None:
    thread, e = rome(alice)
    page = page_of(admin_client, thread)
    assert turn_ids(page) == [e["q"].id, e["colosseum"].id]
    assert "the active branch" in page and "Start at the Vatican" not in page.split('class="cv-branches"')[0]
    # Folded at the question, with its size, and a link that shows that branch.
    assert "1 other branch from here" in page
    link = re.search(
        r'<details class="cv-branches">.*?<a href="([^"]+)">#3 assistant: Start at the Vatican</a>', page, re.S
    )
    assert link is not None and "2 turns" in page
    other = admin_client.get(link.group(1).replace("&amp;", "&")).content.decode()
    assert turn_ids(other) == [e["q"].id, e["vatican"].id, e["more"].id]
    assert "another branch (not the active one)" in other and "show the active branch" in other
    assert "anchor" in turn_classes(other)[e["vatican"].id]
    # The leaf is marked; every turn links to its entry's own page.
    assert "active leaf" in turn_classes(page)[e["colosseum"].id] or "cv-tag leaf" in page
    assert f"/admin/memoryapp/entry/{e['q'].id.replace('_', '_5F')}/change/" in page


def test_a_link_to_a_turn_off_the_active_branch_opens_that_turns_branch(admin_client: Client, alice: Caller) -> None:
    thread, e = rome(alice)
    page = page_of(admin_client, thread, entry=e["more"].id)
    assert turn_ids(page) == [e["q"].id, e["vatican"].id, e["more"].id]
    assert turn_classes(page)[e["more"].id].split() == ["cv-message", "role-user", "anchor"]
    # An explicit leaf shows that branch too.
    page = page_of(admin_client, thread, leaf=e["vatican"].id)
    assert turn_ids(page) == [e["q"].id, e["vatican"].id]


def test_forks_are_linked_both_ways_with_the_entry_they_were_made_at(admin_client: Client, alice: Caller) -> None:
    thread, e = rome(alice)
    fork = thread_fork(thread=thread, entry_id=e["q"].id, new_thread_id="rome-fork")
    entry_add(thread=fork, role="assistant", content="Start with breakfast in Trastevere")
    origin = page_of(admin_client, thread)
    assert re.search(
        rf'Forks: <a href="/admin/memoryapp/thread/{fork.pk}/change/">rome-fork</a> \(at <a href="[^"]*entry={e["q"].id}',
        origin,
    )
    assert "forked here into" in origin.split(f'id="entry-{e["q"].id}"')[1].split("</li>")[0]
    forked = page_of(admin_client, fork)
    assert re.search(
        rf'Forked from <a href="/admin/memoryapp/thread/{thread.pk}/change/\?entry={e["q"].id}#entry-{e["q"].id}">rome</a> at entry',
        forked,
    )
    assert "Start with breakfast in Trastevere" in forked and "Plan a day in Rome" in forked


def test_tool_calls_results_summaries_redactions_and_events_are_drawn_as_such(
    admin_client: Client, alice: Caller
) -> None:
    thread = thread_create(agent=alice.agent, external_id="tools")
    entry_add(thread=thread, role="user", content="What is the weather in Oslo?\nAnd tomorrow?")
    entry_add(
        thread=thread,
        role="assistant",
        content="Checking.",
        tool_calls=[{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}],
    )
    entry_add(thread=thread, type="tool_result", tool_call_id="c1", content="Oslo: 4°C, rain")
    secret = entry_add(thread=thread, role="user", content="My card number is 4111")
    entry_redact(entry=secret, reason="card number", actor="test")
    entry_add(thread=thread, type="model_change", event={"model": "big-model-2"})
    entry_add(
        thread=thread,
        type="compaction",
        role="user",
        content="The user asked about the weather in Oslo.",
        event={"strategy": "summarize-old-preserve-recent", "summary": "…", "tokens_before": 900, "tokens_after": 40},
    )
    page = page_of(admin_client, thread)
    # Line breaks are kept (the text is drawn as it was written, pre-wrap), tools folded with their names.
    assert "What is the weather in Oslo?\nAnd tomorrow?" in page
    assert re.search(r'<details class="cv-tool cv-call"><summary>tool call <b>weather</b>', page)
    assert "&quot;city&quot;: &quot;Oslo&quot;" in page
    assert re.search(r'<details class="cv-tool"><summary>result of <b>weather</b>', page)
    assert "[redacted]" in page and "reason: card number" in page and "4111" not in page
    assert "model changed to big-model-2" in page
    assert "Compaction summary (summarize-old-preserve-recent): 900 → 40 tokens" in page
    assert "The user asked about the weather in Oslo." in page


def test_the_quotes_items_took_from_a_turn_are_marked_with_a_link_to_the_item(
    admin_client: Client, alice: Caller
) -> None:
    thread = thread_create(agent=alice.agent, external_id="food", user_id="u-ana")
    said = entry_add(thread=thread, role="user", content="No shellfish for me, it makes me ill. I love  pasta though.")
    item = item_write(
        agent=alice.agent,
        kind="fact",
        subject="Ana",
        attribute="allergy",
        value="shellfish",
        trust="model",
        user_id="u-ana",
        evidence=[{"entry_id": said.id, "quote": "No shellfish for me"}],
    )
    loved = item_write(
        agent=alice.agent,
        kind="preference",
        subject="Ana",
        attribute="food",
        value="pasta",
        trust="model",
        user_id="u-ana",
        evidence=[{"entry_id": said.id, "quote": "I love pasta"}],  # whitespace aside, as verification reads it
    )
    page = page_of(admin_client, thread)
    item_url = f"/admin/memoryapp/memoryitem/{item.pk.replace('_', '_5F')}/change/"
    assert '<mark class="quote" title="[1] Ana · allergy (suggested)">No shellfish for me</mark>' in page
    assert f'<a class="qref" href="{item_url}"' in page
    assert '<mark class="quote" title="[2] Ana · food (suggested)">I love  pasta</mark>' in page
    assert loved.pk.replace("_", "_5F") in page


def test_a_long_turn_is_folded_to_a_few_lines_with_show_all(admin_client: Client, alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="long")
    entry_add(thread=thread, role="assistant", content="\n".join(f"Step {n}: do the next thing." for n in range(40)))
    entry_add(thread=thread, role="user", content="Thanks!")
    page = page_of(admin_client, thread)
    assert page.count('class="cv-text cv-long"') == 1 and "show all" in page
    assert "Step 39: do the next thing." in page  # all of it is there, folded by CSS


def test_a_long_thread_is_paged_along_its_branch(admin_client: Client, alice: Caller) -> None:
    thread = locomo_thread(agent=alice.agent, external_id="long-talk", turns=250)
    seqs = dict(Entry.objects.filter(thread=thread).values_list("id", "seq"))

    def shown(page: str) -> list[int]:
        return [seqs[i] for i in turn_ids(page)]

    newest = page_of(admin_client, thread)
    assert shown(newest) == list(range(151, 251))
    earlier = re.search(r'<a href="([^"]+)" class="cv-earlier">', newest)
    assert earlier and 'class="cv-later"' not in newest
    middle = admin_client.get(earlier.group(1).replace("&amp;", "&")).content.decode()
    assert shown(middle) == list(range(51, 151))
    first = page_of(admin_client, thread, start="1")
    assert shown(first) == list(range(1, 101)) and 'class="cv-earlier"' not in first
    later = re.search(r'<a href="([^"]+)" class="cv-later">', first)
    assert later
    assert shown(admin_client.get(later.group(1).replace("&amp;", "&")).content.decode()) == list(range(101, 201))
    # A link to turn 120 opens the page around it, marked.
    anchor = Entry.objects.get(thread=thread, seq=120)
    around = page_of(admin_client, thread, entry=anchor.id)
    assert shown(around) == list(range(70, 170))
    assert "anchor" in turn_classes(around)[anchor.id]


@pytest.mark.parametrize("params", [{"entry": "ent_nope"}, {"before": "x" * 300}, {"leaf": "nope"}, {"after": "nope"}])
def test_a_page_parameter_naming_no_entry_of_the_thread_is_a_message_not_an_error(
    admin_client: Client, alice: Caller, bob: Caller, params: dict[str, str]
) -> None:
    thread, e = rome(alice)
    page = page_of(admin_client, thread, **params)
    assert "is not an entry of this thread" in page
    assert turn_ids(page) == [e["q"].id, e["colosseum"].id]
    # A NUL never reaches a query: the request is refused before (400, not a 500).
    assert admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/change/", {"entry": "a\x00b"}).status_code == 400


def test_an_entry_of_another_thread_is_not_shown_as_an_anchor(admin_client: Client, alice: Caller, bob: Caller) -> None:
    thread, _ = rome(alice)
    other = thread_create(agent=bob.agent, external_id="bobs")
    bobs = entry_add(thread=other, role="user", content="bob's secret")
    page = page_of(admin_client, thread, entry=bobs.id)
    assert "bob&#x27;s secret" not in page and "bob's secret" not in page
    assert "is not an entry of this thread" in page


def test_who_may_read_the_conversation(alice: Caller) -> None:
    thread, _ = rome(alice)
    url = f"/admin/memoryapp/thread/{thread.pk}/change/"
    for group in ("Reviewers", "Privacy officers"):
        assert staff(group.replace(" ", ""), group).get(url).status_code == 200, group
    assert staff("operator", "Operators").get(url).status_code == 403
    reviewer = staff("rita", "Reviewers")
    page = reviewer.get(url).content.decode()
    # A reviewer reads; the buttons that change things are not offered.
    assert "Compact now" not in page and "Delete thread" not in page and "change…" not in page


def test_the_thread_page_has_no_form_that_saves_the_thread(admin_client: Client, alice: Caller) -> None:
    thread, _ = rome(alice)
    thread_before = Thread.objects.values("user_id", "metadata", "updated_at").get(pk=thread.pk)
    response = admin_client.post(
        f"/admin/memoryapp/thread/{thread.pk}/change/", {"user_id": "u-new", "metadata": '{"topic": "roma"}'}
    )
    assert response.status_code == 405
    assert Thread.objects.values("user_id", "metadata", "updated_at").get(pk=thread.pk) == thread_before
    page = page_of(admin_client, thread)
    # The page's buttons each post to their own address, none to the thread's page.
    actions = re.findall(r'<form method="post" action="([^"]+)"', page)
    assert actions == [f"/admin/memoryapp/thread/{thread.pk}/compact/", f"/admin/memoryapp/thread/{thread.pk}/extract/"]


def _branched_and_forked(caller: Caller, turns: int) -> Thread:
    """A thread of `turns` real turns with tool calls, branches near its start and its end, and a
    fork near its end: every page read below holds a branch point, at either size."""
    thread = locomo_thread(agent=caller.agent, external_id=f"talk-{turns}", turns=turns, tools_every=25)
    for seq in (10, turns - 20):
        at = Entry.objects.get(thread=thread, seq=seq)
        side = entry_add(thread=thread, role="assistant", content="Another answer", parent_id=at.id, activate=False)
        entry_add(thread=thread, role="user", content="And then?", parent_id=side.id, activate=False)
    thread_fork(
        thread=thread, entry_id=Entry.objects.get(thread=thread, seq=turns - 10).id, new_thread_id=f"fork-{turns}"
    )
    thread.refresh_from_db()
    return thread


def _queries(client: Client, thread: Thread, **params: Any) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(f"/admin/memoryapp/thread/{thread.pk}/change/", params).status_code == 200
    return len(captured.captured_queries)


def test_the_conversation_page_costs_the_same_queries_at_50_and_2000_turns(admin_client: Client, alice: Caller) -> None:
    small = _branched_and_forked(alice, 50)
    large = _branched_and_forked(alice, 2000)
    fork = Thread.objects.get(external_id="fork-2000")
    admin_client.get("/admin/")
    for params in ({}, {"start": "1"}):
        assert _queries(admin_client, small, **params) == _queries(admin_client, large, **params) <= 16, params
    # Anchored at the late branch point; and a fork's page (its origin named).
    anchors = [Entry.objects.get(thread=t, seq=n - 20).id for t, n in ((small, 50), (large, 2000))]
    assert _queries(admin_client, small, entry=anchors[0]) == _queries(admin_client, large, entry=anchors[1]) <= 20
    assert _queries(admin_client, fork) <= 16
