"""A person's page: what each agent holds about one person id, by kind, counted by the erasure's own
selectors, with links to the lists filtered to the person, the holds and requests naming them, and
Erase / Export buttons opening the request forms filled in; found from the start page's search box.
Each role sees only what its permissions open (tested both ways); an id that matches nothing says so,
here and on the erasure's confirm step."""

from __future__ import annotations

import re

import pytest

from governance.models import ErasureRequest
from memoryapp.forgetting.person import person_erase_plan, person_holdings
from memoryapp.items.facts import fact_remember
from memoryapp.models import LegalHold
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.factories import MemoryFileVersionFactory, MemoryItemFactory, ThreadFactory

pytestmark = pytest.mark.django_db

PERSON = "auth0|ana.pereira@example.org"
PAGE = "/admin/person/"


def _ana(alice: Caller, bob: Caller) -> None:
    """Ana in two agents: threads, items, a fact, a file; and someone else beside her."""
    for n in range(2):
        ThreadFactory(agent=alice.agent, external_id=f"t-{n}", user_id=PERSON, turns=[("user", "hi")] * 3)
    ThreadFactory(agent=bob.agent, external_id="t-b", user_id=PERSON, turns=[("user", "hello")])
    ThreadFactory(agent=bob.agent, external_id="t-other", user_id="u-ben", turns=[("user", "not her")])
    MemoryItemFactory(agent=alice.agent, user_id=PERSON, attribute="diet", value="vegetarian")
    MemoryItemFactory(agent=bob.agent, user_id=PERSON, attribute="city", value="Lisbon")
    MemoryItemFactory(agent=bob.agent, user_id="u-ben", attribute="city", value="Porto")
    fact_remember(agent=alice.agent, namespace=f"users/{PERSON}", key="tz", value="Europe/Lisbon")
    MemoryFileVersionFactory(agent=alice.agent, user_id=PERSON, path="/memories/ana.md")


def _table(page: str) -> list[list[str]]:
    body = page.split('id="person-holdings"')[1].split("</table>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        for row in rows
    ]


def test_a_privacy_officer_sees_every_kind_held_about_a_person_per_agent_with_links(alice: Caller, bob: Caller) -> None:
    _ana(alice, bob)
    LegalHold.objects.create(user_id=PERSON, reason="litigation", placed_by="staff:olga")
    ErasureRequest.objects.create(user_id=PERSON, legal_basis="Art. 17")
    answer = staff_client(username="olga", groups=("Privacy officers",)).get(PAGE, {"id": PERSON})
    assert answer.status_code == 200
    page = answer.content.decode()
    header, *rows = _table(page)
    assert header == [
        "agent",
        "threads",
        "entries in them",
        "their messages in others&#x27; threads",
        "memory items",
        "facts",
        "entities",
        "memory file versions",
    ]
    by_agent = {row[0]: row[1:] for row in rows}
    assert by_agent[alice.agent.slug][:2] == ["2", "6"] and by_agent[alice.agent.slug][3:5] == ["1", "1"]
    assert by_agent[alice.agent.slug][6] == "1"
    assert by_agent[bob.agent.slug][:2] == ["1", "1"] and by_agent[bob.agent.slug][3] == "1"
    assert by_agent["all agents"][0] == "3"
    # the counts are the erasure's: the same selectors
    plan = person_erase_plan(user_id=PERSON)
    held = person_holdings(user_id=PERSON)
    assert sum(k["threads"] for k in held.values()) == plan["threads"]
    assert sum(k["items"] + k["facts"] for k in held.values()) == plan["items"]
    # links to the lists filtered to the agent and the person, which list just those rows
    threads_url = f"/admin/memoryapp/thread/?agent__id__exact={alice.agent.pk}&amp;user_id__exact=auth0%7Cana.pereira%40example.org"
    assert threads_url in page
    listed_by = staff_client(username="olga2", groups=("Privacy officers",))
    listed = listed_by.get(threads_url.replace("&amp;", "&"))
    assert listed.status_code == 200 and listed.content.decode().count('class="field-thread_link"') == 2
    assert "attribute__startswith=core%3A" in page
    # every count's link opens its list, narrowed to the agent and the person (no "?e=1" refusal)
    body = page.split('id="person-holdings"')[1].split("</table>")[0]
    links = [href.replace("&amp;", "&") for href in re.findall(r'<td class="person-count"><a href="([^"]+)"', body)]
    assert len(links) >= 8
    for link in links:
        answer = listed_by.get(link)
        assert answer.status_code == 200, link  # an unknown filter would redirect to ?e=1
        assert 'id="result_list"' in answer.content.decode(), link  # rows, not an empty list
    # holds, requests, and the two buttons filled in
    assert 'id="person-holds"' in page and "in force" in page
    assert 'id="person-erasures"' in page
    assert 'href="/admin/governance/erasurerequest/add/?user_id=auth0%7Cana.pereira%40example.org"' in page
    assert 'href="/admin/governance/exportrequest/add/?user_id=auth0%7Cana.pereira%40example.org"' in page
    assert "Nothing is held" not in page


def test_a_reviewer_sees_conversations_and_items_but_no_files_holds_requests_or_buttons(
    alice: Caller, bob: Caller
) -> None:
    _ana(alice, bob)
    LegalHold.objects.create(user_id=PERSON, reason="litigation", placed_by="staff:olga")
    page = staff_client(username="rita", groups=("Reviewers",)).get(PAGE, {"id": PERSON}).content.decode()
    header = _table(page)[0]
    assert "threads" in header and "memory items" in header and "facts" in header
    assert "memory file versions" not in header
    assert 'id="person-holds"' not in page and 'id="person-erase"' not in page and 'id="person-export"' not in page


def test_an_operator_sees_nothing_held_about_a_person(alice: Caller, bob: Caller) -> None:
    _ana(alice, bob)
    olav = staff_client(username="olav", groups=("Operators",))
    page = olav.get(PAGE, {"id": PERSON}).content.decode()
    assert 'id="person-none-for-role"' in page
    assert 'id="person-holdings"' not in page and "vegetarian" not in page and "t-0" not in page
    # and the start page offers them no person search
    assert 'id="find-person"' not in olav.get("/admin/").content.decode()


def test_the_start_page_search_box_leads_to_the_persons_page(alice: Caller) -> None:
    page = staff_client(username="olga", groups=("Privacy officers",)).get("/admin/").content.decode()
    assert 'id="find-person"' in page and 'action="/admin/person/"' in page and 'name="id"' in page


def test_an_id_that_matches_nothing_is_said_plainly_on_the_page_and_before_an_erasure(
    alice: Caller, bob: Caller
) -> None:
    _ana(alice, bob)
    olga = staff_client(username="olga", groups=("Privacy officers",), is_superuser=False)
    page = olga.get(PAGE, {"id": "auth0|ana.pereira@example.org "}).content.decode()  # stripped: her id
    assert "Nothing is held" not in page
    page = olga.get(PAGE, {"id": "Auth0|Ana.Pereira@example.org"}).content.decode()  # ids match exactly
    assert 'id="person-nothing"' in page and 'id="person-holdings"' not in page
    assert 'id="person-erase"' not in page  # no button to erase nothing
    # the erasure's confirm step warns before anything is filed
    confirm = olga.post(
        "/admin/governance/erasurerequest/add/",
        {"user_id": "Auth0|Ana.Pereira@example.org", "mode": "erase", "legal_basis": "Art. 17"},
    ).content.decode()
    assert "Nothing is held about" in confirm
    assert not ErasureRequest.objects.exists()


def test_a_threads_and_an_items_page_link_their_persons_page(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, user_id=PERSON, turns=[("user", "hi")])
    item = MemoryItemFactory(agent=alice.agent, user_id=PERSON, value="vegetarian")
    olga = staff_client(username="olga", groups=("Privacy officers",))
    link = 'href="/admin/person/?id=auth0%7Cana.pereira%40example.org"'
    assert link in olga.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    assert link in olga.get(f"/admin/memoryapp/memoryitem/{item.pk}/change/").content.decode()


def test_only_a_privacy_officer_may_change_a_persons_identifiers(alice: Caller) -> None:
    from memoryapp.models import PersonIdentifier
    from memoryapp.screening.identifiers import identifiers_of, identifiers_set

    identifiers_set(agent=alice.agent, user_id=PERSON, body={"emails": ["ana@example.org"]}, actor="test")
    body = {"user_id": PERSON, "agent": alice.agent.pk, "emails": "other@example.org", "names": "Ana Pereira"}
    for role in ("Reviewers", "Operators"):
        client = staff_client(username=f"x-{role}", groups=(role,))
        answer = client.post(PAGE, body, follow=True)
        assert answer.status_code == 200
        assert "may not change a person" in answer.content.decode()
        assert "ana@example.org" not in answer.content.decode()  # nor read them
    assert identifiers_of(agent=alice.agent, user_id=PERSON)["emails"] == ["ana@example.org"]
    officer = staff_client(username="olga", groups=("Privacy officers",))
    answer = officer.post(PAGE, body, follow=True)
    assert "Identifiers saved for" in answer.content.decode()
    assert identifiers_of(agent=alice.agent, user_id=PERSON) == {
        "emails": ["other@example.org"],
        "phones": [],
        "names": ["ana pereira"],
        "external_ids": [],
    }
    assert PersonIdentifier.objects.filter(user_id=PERSON).count() == 2
    # An agent that does not exist: nothing saved, said so.
    answer = officer.post(PAGE, {**body, "agent": "999999"}, follow=True)
    assert "Choose an agent" in answer.content.decode()
