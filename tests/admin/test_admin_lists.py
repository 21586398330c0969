"""The lists of the admin that staff live in: entries (full-text search), the audit trail (date
filters, subjects as links), the entry page (the memory standing on it, redaction offered) and the
agent page (links to everything of the agent)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from governance.models import AuditRecord
from memoryapp.forgetting.services import entry_delete
from memoryapp.items.services import item_write
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.api import Caller

pytestmark = pytest.mark.django_db


def listed_ids(page: str, model: str) -> list[str]:
    return re.findall(rf'<th class="field-entry_link"><a href="/admin/memoryapp/{model}/([^/]+)/change/', page)


def test_entry_search_finds_words_through_the_full_text_index(admin_client: Client, alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="food")
    ill = entry_add(thread=thread, role="user", content="Shellfish makes me ill, so no prawns please.")
    entry_add(thread=thread, role="assistant", content="Noted: nothing from the sea.")
    runs = entry_add(thread=thread, role="user", content="I was running all morning")
    page = admin_client.get("/admin/memoryapp/entry/", {"q": "shellfish"}).content.decode()
    assert listed_ids(page, "entry") == [ill.id.replace("_", "_5F")]
    # Stems: "run" finds "running"; a phrase; an exact id still finds its entry.
    assert listed_ids(admin_client.get("/admin/memoryapp/entry/", {"q": "run"}).content.decode(), "entry") == [
        runs.id.replace("_", "_5F")
    ]
    phrase = admin_client.get("/admin/memoryapp/entry/", {"q": '"no prawns"'}).content.decode()
    assert listed_ids(phrase, "entry") == [ill.id.replace("_", "_5F")]
    by_id = admin_client.get("/admin/memoryapp/entry/", {"q": runs.id}).content.decode()
    assert listed_ids(by_id, "entry") == [runs.id.replace("_", "_5F")]
    assert listed_ids(admin_client.get("/admin/memoryapp/entry/", {"q": "zebra"}).content.decode(), "entry") == []


def test_entry_search_reads_the_search_vector_not_the_text(admin_client: Client, alice: Caller) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    thread = thread_create(agent=alice.agent, external_id="t")
    entry_add(thread=thread, role="user", content="hello there")
    with CaptureQueriesContext(connection) as captured:
        admin_client.get("/admin/memoryapp/entry/", {"q": "hello"})
    sql = [q["sql"] for q in captured.captured_queries]
    assert any("websearch_to_tsquery" in q and '"search_vector" @@' in q for q in sql)
    assert not any("LIKE" in q or "UPPER(" in q for q in sql)


def test_the_entry_list_cuts_long_text_and_keeps_the_whole_of_it_on_hover(admin_client: Client, alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t")
    long_text = "word " * 200
    entry_add(thread=thread, role="user", content=long_text)
    page = admin_client.get("/admin/memoryapp/entry/").content.decode()
    cell = re.search(r'<td class="field-short_text"><span class="cell-text" title="([^"]*)">([^<]*)</span>', page)
    assert cell is not None
    assert cell.group(1) == long_text.strip() and len(cell.group(2)) == 90 and cell.group(2).endswith("…")
    # The thread column links to the turn in its conversation.
    assert re.search(r'<td class="field-thread_link"><a href="/admin/memoryapp/thread/\d+/change/\?entry=', page)


def test_the_entry_page_shows_the_items_standing_on_it_and_offers_redaction(
    admin_client: Client, alice: Caller
) -> None:
    thread = thread_create(agent=alice.agent, external_id="t", user_id="u-ana")
    said = entry_add(thread=thread, role="user", content="I am vegetarian now.")
    item = item_write(
        agent=alice.agent,
        kind="preference",
        subject="Ana",
        attribute="diet",
        value="vegetarian",
        trust="model",
        user_id="u-ana",
        evidence=[{"entry_id": said.id, "quote": "I am vegetarian"}],
    )
    quoted = said.id.replace("_", "_5F")
    page = admin_client.get(f"/admin/memoryapp/entry/{quoted}/change/").content.decode()
    assert f'href="/admin/memoryapp/memoryitem/{item.pk.replace("_", "_5F")}/change/"' in page
    assert (
        "<td>Ana · diet</td>" in page
        and '“<span class="cell-text" title="I am vegetarian">I am vegetarian</span>”' in page
    )
    assert f'href="/admin/memoryapp/entry/{quoted}/redact/" id="redact-link"' in page
    assert "In the conversation" in page
    assert 'name="_save"' not in page  # nothing on it is edited by a form


def test_a_reviewer_sees_the_entry_page_without_redaction(alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t")
    said = entry_add(thread=thread, role="user", content="hello")
    user = User.objects.create_user("rita", password="x", is_staff=True)
    user.groups.set(Group.objects.filter(name="Reviewers"))
    client = Client()
    client.force_login(user)
    page = client.get(f"/admin/memoryapp/entry/{said.id.replace('_', '_5F')}/change/").content.decode()
    assert "hello" in page and "Redact…" not in page and "Delete…" not in page


def test_the_audit_list_filters_by_dates_and_links_its_subjects(admin_client: Client, alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="rome")
    first = entry_add(thread=thread, role="user", content="one")
    entry_add(thread=thread, role="user", content="two")
    entry_delete(entry=first, actor="test")
    item = item_write(
        agent=alice.agent, kind="fact", subject="Ana", attribute="city", value="Rome", trust="user", user_id="u"
    )
    old = AuditRecord.objects.filter(action="agent_key.created").first()
    assert old is not None
    AuditRecord.objects.filter(pk=old.pk).update(at=timezone.now() - timedelta(days=40))
    page = admin_client.get("/admin/governance/auditrecord/").content.decode()
    # An item's record links to the item; a deleted entry's stays text; the thread column links.
    assert f'<a href="/admin/memoryapp/memoryitem/{item.pk.replace("_", "_5F")}/change/"' in page
    assert re.search(
        rf'<td class="field-where"><a href="/admin/memoryapp/agent/{alice.agent.pk}/change/" title="alice">alice</a>'
        rf' / <a href="/admin/memoryapp/thread/{thread.pk}/change/" title="rome">rome</a>',
        page,
    )
    assert f'title="{first.id}"' in page or f">{first.id}<" in page
    assert f'href="/admin/memoryapp/thread/{thread.pk}/change/?entry={first.id}' not in page
    assert '<a href="/admin/memoryapp/agent/' in page and ">alice<" in page
    today = timezone.localdate().isoformat()
    recent = admin_client.get("/admin/governance/auditrecord/", {"at_from": today}).content.decode()
    assert "agent_key.created" not in re.sub(r"<select.*?</select>|<details.*?</details>", "", recent, flags=re.S)
    ancient = (timezone.localdate() - timedelta(days=40)).isoformat()
    only_old = admin_client.get("/admin/governance/auditrecord/", {"at_from": ancient, "at_to": ancient})
    assert [r.pk for r in only_old.context["cl"].result_list] == [old.pk]
    # A date that is no date filters nothing (and is no error).
    assert admin_client.get("/admin/governance/auditrecord/", {"at_from": "soon"}).status_code == 200


def test_the_agent_page_links_to_everything_of_the_agent(admin_client: Client, alice: Caller) -> None:
    thread_create(agent=alice.agent, external_id="t")
    page = admin_client.get(f"/admin/memoryapp/agent/{alice.agent.pk}/change/").content.decode()
    pk = alice.agent.pk
    for href in (
        f"/admin/memoryapp/thread/?agent__id__exact={pk}",
        f"/admin/memoryapp/entry/?agent__id__exact={pk}",
        f"/admin/memoryapp/memoryitem/?agent__id__exact={pk}",
        f"/admin/memoryapp/memoryitem/review/?agent={pk}",
        "/admin/memoryapp/memoryfileversion/tree/?agent=alice",
        f"/admin/governance/jobrun/?agent_id={pk}",
        f"/admin/governance/auditrecord/?agent_id={pk}",
    ):
        assert f'href="{href}"' in page, href
        assert admin_client.get(href).status_code == 200, href
    assert "threads (1)" in page
    entries = admin_client.get(f"/admin/memoryapp/entry/?agent__id__exact={pk}")
    assert entries.status_code == 200
