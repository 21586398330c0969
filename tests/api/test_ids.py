"""One rule for the ids clients give threads and entries: checked on create, fork and import,
so every id stored can be reached by the API and the admin."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from memoryapp.errors import DomainError
from memoryapp.ids import MAX_ENTRY_ID, entry_id_imported, entry_id_is_agents, entry_id_new
from memoryapp.models import Entry, Thread
from memoryapp.threads.transfer import thread_import
from tests.kit.api import Caller, error_of, import_jsonl, jsonl_node, post_entry, post_thread

pytestmark = pytest.mark.django_db

BAD_THREAD_IDS = ["a/b", ".", "..", "import", "a b", "a\nb", "tab\there", "100%", "é", "x" * 129]
BAD_ENTRY_IDS = ["a/b", ".", "..", "a\nb", "a b", "a?b", "a#b", "x" * 41, ""]
# Every character the rule allows, including those the admin quotes in its URLs (`_3A` reads as `:`).
ODD_THREAD_ID = "t_3A:1@x+y~z.w-v"
ODD_ENTRY_IDS = ["e_3A:1@a+b~c.d-e", "e_2F_5Fz"]


def error_field(response: Any) -> str:
    return str(error_of(response)["field"])


@pytest.mark.parametrize("thread_id", BAD_THREAD_IDS)
def test_a_thread_id_outside_the_rule_is_a_400_naming_id_on_create_fork_and_import(
    alice: Caller, thread_id: str
) -> None:
    created = alice.client.post("/api/v1/threads", {"id": thread_id}, format="json")
    assert error_field(created) == "id"
    origin = post_thread(alice, "origin", status=201)
    entry = post_entry(alice, "origin", role="user", content="hi")
    fork = alice.client.post(
        "/api/v1/threads/origin/fork", {"entry_id": entry["id"], "new_thread_id": thread_id}, format="json"
    )
    assert error_field(fork) == "new_thread_id"
    query = import_jsonl(alice, [jsonl_node("ent_q1")], "?" + urlencode({"id": thread_id}))
    assert error_field(query) == "id"
    in_body = alice.client.post("/api/v1/threads/import", {"id": thread_id, "records": []}, format="json")
    assert error_field(in_body) == "id"
    header = json.dumps({"type": "thread", "thread": {"id": thread_id}})
    from_file = import_jsonl(alice, [header, jsonl_node("ent_h1")])
    assert error_field(from_file) == "line 1.thread.id"
    assert list(Thread.objects.values_list("external_id", flat=True)) == [origin["id"]]
    assert Entry.objects.count() == 1


@pytest.mark.parametrize("entry_id", BAD_ENTRY_IDS)
def test_an_imported_entry_id_outside_the_rule_is_a_400_naming_its_line(alice: Caller, entry_id: str) -> None:
    response = import_jsonl(alice, [jsonl_node("ent_ok1"), jsonl_node(entry_id, parent="ent_ok1", seq=2)], "?id=t-imp")
    assert error_field(response) == "line 2.id"
    assert not Thread.objects.exists() and not Entry.objects.exists()


def test_the_import_service_checks_node_ids_for_every_caller(alice: Caller) -> None:
    nodes = [{"id": "a\nb", "parent_id": None, "seq": 1, "role": "user", "content": "hi"}]
    with pytest.raises(DomainError) as caught:
        thread_import(agent=alice.agent, external_id="t-direct", nodes=nodes, leaf_id=None)
    assert caught.value.field == "nodes[0].id"
    assert not Thread.objects.exists()


def test_ids_with_every_allowed_character_are_reachable_over_the_api_and_in_the_admin(
    alice: Caller, admin_client: Client
) -> None:
    first, second = ODD_ENTRY_IDS
    lines = [jsonl_node(first), jsonl_node(second, parent=first, seq=2), json.dumps({"type": "head", "leaf": second})]
    imported = import_jsonl(alice, lines, f"?id={ODD_THREAD_ID.replace('+', '%2B')}")
    assert imported.status_code == 201, imported.content
    assert imported.json()["id"] == ODD_THREAD_ID
    # Node ids not made for alice are stored under ids derived from them (memoryapp.ids).
    first, second = (entry_id_imported(i, agent_id=alice.agent.pk) for i in ODD_ENTRY_IDS)
    assert alice.client.get(f"/api/v1/threads/{ODD_THREAD_ID}").json()["active_leaf_id"] == second
    assert alice.client.get(f"/api/v1/entries/{second}").json()["parent_id"] == first
    thread = Thread.objects.get(external_id=ODD_THREAD_ID)
    page = admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/change/")
    assert page.status_code == 200
    links = set(re.findall(r'href="(/admin/memoryapp/entry/[^"]+/change/)"', page.content.decode()))
    reached = {}
    for link in links:
        entry_page = admin_client.get(link)
        assert entry_page.status_code == 200, link  # a pk read wrongly redirects to the list
        reached[entry_page.context["original"].pk] = link
    assert set(reached) == {first, second}
    child = admin_client.get(reached[second]).content.decode()
    parent_link = re.search(r'href="(/admin/memoryapp/entry/[^"]+/change/)">' + re.escape(first), child)
    assert parent_link and admin_client.get(parent_link.group(1)).context["original"].pk == first
    assert alice.client.delete(f"/api/v1/entries/{second}").status_code == 204
    assert alice.client.delete(f"/api/v1/threads/{ODD_THREAD_ID}").status_code == 204
    assert not Entry.objects.exists()


def test_an_entry_id_made_for_an_agent_comes_back_from_its_imports_and_is_derived_for_any_other() -> None:
    made = entry_id_new(agent_id=1)
    assert entry_id_is_agents(made, agent_id=1) and not entry_id_is_agents(made, agent_id=2)
    assert entry_id_imported(made, agent_id=1) == made
    theirs = entry_id_imported(made, agent_id=2)
    assert theirs != made and entry_id_imported(theirs, agent_id=2) == theirs
    assert (
        entry_id_imported("n1", agent_id=2)
        == entry_id_imported("n1", agent_id=2)
        != entry_id_imported("n1", agent_id=1)
    )
    assert all(len(i) <= MAX_ENTRY_ID for i in (made, theirs)) and not entry_id_is_agents("n1", agent_id=1)


def test_an_import_naming_a_node_and_the_id_derived_from_it_is_refused_not_a_500(alice: Caller) -> None:
    # A foreign node id is stored under one derived from it; a file naming both would store two
    # nodes under one id (a duplicate primary key in the insert).
    derived = entry_id_imported("n1", agent_id=alice.agent.pk)
    head = json.dumps({"type": "head", "leaf": derived})
    lines = [jsonl_node("n1"), jsonl_node(derived, parent="n1", seq=2), head]

    response = import_jsonl(alice, lines, "?id=t-twice")

    assert response.status_code == 400, response.content
    assert error_of(response)["code"] == "duplicate_id"
    assert not Thread.objects.filter(external_id="t-twice").exists() and not Entry.objects.exists()
