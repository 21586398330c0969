"""The reviewers' admin pages of consolidation: drafts (diff, lessons and quotes, promote / discard),
items marked stale (why, undo), entity pages; and who may do what."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client

from governance.models import AuditRecord
from memoryapp.consolidation.dedupe import scope_dedupe
from memoryapp.consolidation.fold import PLAYBOOK_DRAFT_PATH, PLAYBOOK_PATH, playbook_file, playbook_fold
from memoryapp.consolidation.observations import observations_refresh
from memoryapp.items.rules import Scope
from memoryapp.llm.port import use_model
from memoryapp.models import Agent, MemoryFileVersion, MemoryItem
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.consolidation import active_item, answers, scripted
from tests.kit.factories import EntityFactory, EntryFactory, MemoryFileVersionFactory, MemoryItemFactory, ThreadFactory

pytestmark = pytest.mark.django_db

ANA = Scope(user_id="u-ana")
DRAFTS = "/admin/memoryapp/playbookdraft/"
STALE = "/admin/memoryapp/staleitem/"


def reviewer() -> Client:
    return staff_client(username="rita", groups=("Reviewers",))


def _drafted(caller: Caller) -> tuple[MemoryItem, MemoryFileVersion, Any]:
    """A lesson said in a conversation, folded (shadow mode) into a draft beside a playbook of one rule."""
    thread = ThreadFactory(agent=caller.agent, external_id="t-trip")
    EntryFactory(thread=thread, role="assistant", content="Which hotel should I book?")
    said = EntryFactory(thread=thread, role="user", content="Next time ask me the dates before you search hotels!")
    lesson = MemoryItemFactory(
        agent=caller.agent,
        kind="lesson",
        subject="booking",
        attribute="dates first",
        value="Ask for the dates before searching hotels",
        trust="user",
        evidence=[{"entry_id": said.id, "quote": "ask me the dates before you search hotels"}],
    )
    assert lesson.status == "active"
    MemoryFileVersionFactory(
        agent=caller.agent, user_id="u-ana", path=PLAYBOOK_PATH, content=playbook_file(["Be brief."]), author="user"
    )
    rule = f"Ask for the travel dates before searching hotels. [lesson:{lesson.pk}]"
    with use_model(scripted(answers({"op": "add", "rule": rule}))):
        playbook_fold(agent=caller.agent, scope=ANA)
    draft = MemoryFileVersion.objects.get(agent=caller.agent, path=PLAYBOOK_DRAFT_PATH)
    return lesson, draft, said


def test_a_reviewer_reads_a_draft_beside_the_playbook_with_its_lessons_quotes_and_promotes_it(alice: Caller) -> None:
    lesson, draft, said = _drafted(alice)
    client = reviewer()
    listed = client.get(DRAFTS).content.decode()
    assert f"{DRAFTS}{draft.pk}/review/" in listed and "user u-ana" in listed
    page = client.get(f"{DRAFTS}{draft.pk}/review/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<tr class="same">' in html and '<tr class="added">' in html  # side by side
    assert "Ask for the travel dates before searching hotels." in html and "- Be brief." in html
    assert f'href="/admin/memoryapp/memoryitem/{lesson.pk}/change/"' in html
    assert "<mark>ask me the dates before you search hotels</mark>" in html
    assert f'href="/admin/memoryapp/thread/{said.thread_id}/change/#{said.id}"' in html

    done = client.post(f"{DRAFTS}{draft.pk}/decide/", {"action": "promote"}, follow=True)
    assert "Promoted" in done.content.decode()
    playbook = MemoryFileVersion.objects.filter(agent=alice.agent, path=PLAYBOOK_PATH).order_by("-sequence").first()
    assert playbook is not None and playbook.content == draft.content
    record = AuditRecord.objects.get(action="playbook.promoted")
    assert record.actor == "staff:rita" and record.details == {
        "draft_version": draft.pk,
        "playbook_version": playbook.pk,
    }
    assert "No playbook draft waits" in client.get(DRAFTS).content.decode()


def test_promotion_is_refused_with_the_reason_when_the_playbook_changed_meanwhile(alice: Caller) -> None:
    _, draft, _ = _drafted(alice)
    client = reviewer()
    fresh = client.get(f"{DRAFTS}{draft.pk}/review/").content.decode()
    assert '<span class="pd-promotable">yes</span>' in client.get(DRAFTS).content.decode()
    assert 'name="action" value="promote"' in fresh and 'id="pd-refused"' not in fresh
    MemoryFileVersionFactory(
        agent=alice.agent, user_id="u-ana", path=PLAYBOOK_PATH, content=playbook_file(["Be kind."]), author="user"
    )
    # Marked before anyone clicks (issue 23 §18): in the list, and on the page without a Promote button.
    listed = client.get(DRAFTS).content.decode()
    assert 'class="pd-refused" data-code="playbook_changed"' in listed
    assert "Out of date: the playbook changed since it was drafted" in listed and 'pd-promotable">yes' not in listed
    page = client.get(f"{DRAFTS}{draft.pk}/review/").content.decode()
    assert 'id="pd-refused" data-code="playbook_changed"' in page
    assert "promoting it would undo that change" in page
    assert 'name="action" value="promote"' not in page and 'id="pd-promote" disabled' in page
    assert 'name="action" value="discard"' in page
    answer = client.post(f"{DRAFTS}{draft.pk}/decide/", {"action": "promote"}, follow=True).content.decode()
    assert "Not done: The playbook changed since this draft was made" in answer
    assert not AuditRecord.objects.filter(action="playbook.promoted").exists()
    client.post(f"{DRAFTS}{draft.pk}/decide/", {"action": "discard"})
    assert AuditRecord.objects.get(action="playbook.draft_discarded").subject == draft.pk
    head = MemoryFileVersion.objects.filter(agent=alice.agent, path=PLAYBOOK_DRAFT_PATH).order_by("-sequence").first()
    assert head is not None and head.content is None  # a deletion version; history kept


@pytest.mark.parametrize("role", ["Operators", "Privacy officers"])
def test_operators_and_privacy_officers_neither_promote_nor_discard_nor_undo(alice: Caller, role: str) -> None:
    _, draft, _ = _drafted(alice)
    client = staff_client(username="other", groups=(role,))
    assert client.get(DRAFTS).status_code == 403
    for action in ("promote", "discard"):
        assert client.post(f"{DRAFTS}{draft.pk}/decide/", {"action": action}).status_code == 403
    stale = _stale_pair(alice)
    client.post(STALE, {"action": "undo_stale", "_selected_action": [stale.pk]})
    assert MemoryItem.objects.get(pk=stale.pk).status == "stale"
    assert MemoryFileVersion.objects.filter(agent=alice.agent, path=PLAYBOOK_PATH).count() == 1
    assert not AuditRecord.objects.filter(action__in=["playbook.promoted", "playbook.draft_discarded"]).exists()


def test_a_reviewer_without_the_promote_permission_reads_but_cannot_decide(alice: Caller) -> None:
    _, draft, _ = _drafted(alice)
    client = staff_client(username="reader", permissions=("view_playbookdraft",))
    page = client.get(f"{DRAFTS}{draft.pk}/review/").content.decode()
    assert "needs the permission to promote" in page and 'id="pd-promote"' not in page
    assert client.post(f"{DRAFTS}{draft.pk}/decide/", {"action": "promote"}).status_code == 403


def _stale_pair(caller: Caller) -> MemoryItem:
    kept = active_item(agent=caller.agent, attribute="diet", value="vegetarian")
    dropped = active_item(agent=caller.agent, attribute="food", value="vegetarian")
    with use_model(scripted(answers({"keep": kept.pk, "drop": [dropped.pk], "reason": "duplicate"}))):
        scope_dedupe(agent=caller.agent, scope=ANA)
    return MemoryItem.objects.get(pk=dropped.pk)


def test_a_reviewer_sees_what_a_dedupe_pass_marked_stale_and_why_and_undoes_it(alice: Caller) -> None:
    stale = _stale_pair(alice)
    kept_id = stale.metadata["stale_because"]["kept"]
    client = reviewer()
    listed = client.get(STALE).content.decode()
    assert stale.pk in listed and "repeats the item kept" in listed
    assert f'href="/admin/memoryapp/memoryitem/{kept_id}/change/"' in listed
    assert client.get(f"{STALE}{stale.pk}/change/")["Location"] == f"/admin/memoryapp/memoryitem/{stale.pk}/change/"
    client.post(STALE, {"action": "undo_stale", "_selected_action": [stale.pk]})
    assert MemoryItem.objects.get(pk=stale.pk).status == "active"
    assert AuditRecord.objects.get(action="item.stale_undone").actor == "staff:rita"
    assert stale.pk not in client.get(STALE).content.decode()


def test_an_entity_page_shows_its_other_names_items_and_observation(alice: Caller) -> None:
    items = [
        active_item(agent=alice.agent, attribute=a, value=v)
        for a, v in (("diet", "vegetarian"), ("allergy", "peanuts"), ("city", "Porto"))
    ]
    entity = items[0].entity
    assert entity is not None
    entity.aliases = ["Ana Silva"]
    entity.save()
    statement = "Ana needs meals without meat or peanuts. " + " ".join(f"[item:{i.pk}]" for i in items)
    with use_model(scripted(answers({"text": statement}))):
        observations_refresh(agent=alice.agent, scope=ANA)
    client = reviewer()
    assert "Ana Silva" in client.get("/admin/memoryapp/entityoverview/").content.decode()
    page = client.get(f"/admin/memoryapp/entityoverview/{entity.pk}/change/").content.decode()
    assert '<p id="ep-aliases">Ana Silva</p>' in page
    assert "Ana needs meals without meat or peanuts." in page
    for item in items:
        assert f'href="/admin/memoryapp/memoryitem/{item.pk}/change/"' in page
    assert (
        staff_client(username="op", groups=("Operators",))
        .get(f"/admin/memoryapp/entityoverview/{entity.pk}/change/")
        .status_code
        == 403
    )


def test_every_link_of_the_entity_pages_list_opens_its_page(alice: Caller) -> None:
    """The list links the admin-escaped id (nty_5F01… for nty_01…): the page decodes it (issue 23 §14)."""
    entities = [EntityFactory(agent=alice.agent, name=f"Person {n}") for n in range(3)]
    client = reviewer()
    listed = client.get("/admin/memoryapp/entityoverview/").content.decode()
    links = re.findall(r'href="(/admin/memoryapp/entityoverview/[^"/]+/change/[^"]*)"', listed)
    assert len(links) == 3 and all("_5F" in link for link in links)
    for entity in entities:
        link = next(link for link in links if quote(entity.pk) in link)
        page = client.get(html.unescape(link))
        assert page.status_code == 200, link
        assert f"<code>{entity.pk}</code>" in page.content.decode()


def test_playbook_shadow_mode_is_changed_only_with_the_trust_permission_and_audited(alice: Caller) -> None:
    url = f"/admin/memoryapp/agent/{alice.agent.pk}/change/"
    form = {"slug": "alice", "name": "alice", "active": "on", "shadow_mode": "on", "keys-TOTAL_FORMS": "1",
            "keys-INITIAL_FORMS": "1", "keys-MIN_NUM_FORMS": "0", "keys-MAX_NUM_FORMS": "1000",
            "keys-0-id": str(alice.agent.keys.get().pk), "keys-0-agent": str(alice.agent.pk)}  # fmt: skip
    operator = staff_client(username="op", groups=("Operators",))
    operator.post(url, form)  # playbook shadow mode unticked: off, but read-only for an operator
    assert Agent.objects.get(pk=alice.agent.pk).playbook_shadow_mode
    trusted = staff_client(username="boss", groups=("Operators",), permissions=("set_agent_trust",))
    trusted.post(url, form)
    assert not Agent.objects.get(pk=alice.agent.pk).playbook_shadow_mode
    record = AuditRecord.objects.get(action="agent.playbook_shadow_mode_set")
    assert (record.actor, record.outcome) == ("staff:boss", "off")
