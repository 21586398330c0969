"""The blind index across a rotation with new keys (`encryption_rotate --rekey`), as the service's
processes live through it: the rotation runs in one process while web processes go on writing and
searching with what they have cached.

Each process caches an agent's blind-index key (derived from its own data key). A web process must
stop hashing under the old one once its cache of the agent's data key expires (the rotation's
settle), or the rows it writes after that keep hashes no other process can match once the old key is
destroyed. And while the rotation walks, rows it has not reached yet still hold hashes under the
retired key: keyword search and equality lookups (an item's slot, an entity's name) must still find
them, or a search misses them and a repeated statement writes a second item beside the first.

A process is played here by the module caches it would hold (`governance.crypto.envelope`): saved
before the rotation's first step and put back after it, as the rotation's own process does not
clear another's."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from governance.crypto import envelope
from governance.crypto.envelope import data_keys_forget, data_keys_retire, data_keys_retired_destroy
from governance.crypto.rotation import collisions_unmerged, encryption_rotate, hashed_unique, rows_reseal
from memoryapp.graph.services import relation_write
from memoryapp.items import services as item_services
from memoryapp.items.rules import Scope
from memoryapp.items.selectors import items_holding
from memoryapp.items.services import item_write
from memoryapp.models import (
    Agent,
    Entity,
    Entry,
    IdentifierKind,
    MemoryItem,
    PersonIdentifier,
    Relation,
    RelationEvidence,
)
from memoryapp.models.people import identifier_key
from memoryapp.screening.identifiers import identifiers_of
from tests.kit.api import Caller, answered, get_ok, post_thread

TEXTS = ["the Zanzibarquill pot is blue", "call me about quokkaparade"]


def _post(caller: Caller, texts: list[str], thread_id: str = "t1") -> None:
    answered(caller.client.post("/api/v1/threads", {"id": thread_id, "user_id": "u-ana"}, format="json"), (200, 201))
    entries = [{"role": "user", "content": text} for text in texts]
    answered(caller.client.post(f"/api/v1/threads/{thread_id}/entries", {"entries": entries}, format="json"), 201)


def _found(caller: Caller, text: str) -> list[str]:
    answer = caller.client.post("/api/v1/search", {"text": text, "method": "keyword"}, format="json")
    return [hit["text"] for hit in answered(answer, 200)["results"]]


def _boat_is_blue(agent: Agent) -> MemoryItem:
    return item_write(
        agent=agent, kind="fact", subject="Ana's boat", attribute="colour", value="blue", trust="user", user_id="u-ana"
    )


def _web_process_caches() -> dict[str, Any]:
    return {name: dict(getattr(envelope, name)) for name in ("_by_id", "_by_owner", "_blind")}


def _web_process_back(caches: dict[str, Any], *, owner_cache_expired: bool) -> None:
    """Another process's caches, as the rotation left them (it clears only its own); after the
    settle its cache of each owner's data key has expired, the rest is as it was."""
    for name, values in caches.items():
        getattr(envelope, name).clear()
        getattr(envelope, name).update(values)
    if owner_cache_expired:
        envelope._by_owner.clear()


def test_a_web_process_writing_after_the_settle_hashes_under_the_new_key(
    encrypted: Any, db: None, alice: Caller
) -> None:
    _post(alice, TEXTS)
    assert _found(alice, "quokkaparade") == ["call me about quokkaparade"]
    web = _web_process_caches()

    data_keys_retire()  # the rotation's step 0, in its own process
    _web_process_back(web, owner_cache_expired=True)  # the web process, after the settle
    _post(alice, ["harbourlantern at dawn"], thread_id="t2")
    encryption_rotate(settle=0)  # the walk: every row sealed under its owner's live key
    data_keys_retired_destroy()  # the rotation's last step

    data_keys_forget()  # any process started after the rotation
    assert _found(alice, "harbourlantern") == ["harbourlantern at dawn"]
    assert _found(alice, "Zanzibarquill") == ["the Zanzibarquill pot is blue"]


def test_rows_the_walk_has_not_reached_are_still_found_and_their_slots_matched(
    encrypted: Any, db: None, alice: Caller
) -> None:
    _post(alice, TEXTS)
    agent = Agent.objects.get(slug=alice.agent.slug)
    first = _boat_is_blue(agent)
    entities = Entity.objects.filter(agent=agent).count()

    data_keys_retire()
    data_keys_forget()  # a process once its caches expired: the agent has a new data key and blind key

    # Searched while the walk has not reached them: every row still holds hashes under the old key.
    assert _found(alice, "Zanzibarquill") == ["the Zanzibarquill pot is blue"]
    again = _boat_is_blue(agent)
    assert again.pk == first.pk, "the repeated statement wrote a second item beside the first"
    assert MemoryItem.objects.filter(agent=agent).count() == 1
    assert Entity.objects.filter(agent=agent).count() == entities

    encryption_rotate(settle=0)
    data_keys_retired_destroy()
    data_keys_forget()
    assert _found(alice, "Zanzibarquill") == ["the Zanzibarquill pot is blue"]
    assert _boat_is_blue(agent).pk == first.pk


def test_a_persons_turns_written_in_the_settle_with_the_agents_own_key_still_cached_are_found_after(
    encrypted: Any, db: None, alice: Caller
) -> None:
    """The two keys a turn of a person takes come from two entries of a process's cache, which
    expire apart: a web process that read the agent's own key (its blind key, a search) just before
    the rotation retired the keys, and Ana's key just after it (her key's entry had expired), seals
    her turn under her new key and hashes its words under the agent's old blind key. The walk must
    hash it again, or its words are lost with the old key."""
    _post(alice, TEXTS)
    assert _found(alice, "quokkaparade") == ["call me about quokkaparade"]  # reads the agent's own key
    agent = Agent.objects.get(slug=alice.agent.slug)
    web = _web_process_caches()

    data_keys_retire()
    _web_process_back(web, owner_cache_expired=False)
    now = time.monotonic()
    for owner, (_, key) in list(envelope._by_owner.items()):
        if owner == (agent.pk, ""):
            envelope._by_owner[owner] = (now, key)  # read a moment before the retire: fresh
        else:
            del envelope._by_owner[owner]  # read long before: expired, read again (her new key)
    _post(alice, ["harbourlantern at dawn"])
    encryption_rotate(settle=0)
    data_keys_retired_destroy()

    data_keys_forget()
    assert _found(alice, "harbourlantern") == ["harbourlantern at dawn"]


def test_the_thread_list_filters_metadata_of_threads_the_walk_has_not_reached(
    encrypted: Any, db: None, alice: Caller
) -> None:
    post_thread(alice, "m1", user_id="u-ana", metadata={"topic": "rome"})
    post_thread(alice, "m2", metadata={"topic": "oslo"})

    data_keys_retire()
    data_keys_forget()  # a process once its caches expired

    found = get_ok(alice.client, "/api/v1/threads", {"metadata": json.dumps({"topic": "rome"})})["results"]
    assert [t["id"] for t in found] == ["m1"]
    encryption_rotate(settle=0)
    data_keys_retired_destroy()
    found = get_ok(alice.client, "/api/v1/threads", {"metadata": json.dumps({"topic": "rome"})})["results"]
    assert [t["id"] for t in found] == ["m1"]


def test_the_admin_entry_search_finds_turns_the_walk_has_not_reached(
    encrypted: Any, db: None, admin_client: Client, alice: Caller, bob: Caller
) -> None:
    _post(alice, TEXTS)
    _post(bob, ["the Zanzibarquill ferry", "quokkaparade at noon"])

    data_keys_retire()
    data_keys_forget()
    _post(bob, ["harbourlantern"], thread_id="t2")  # bob has a new key, alice none yet

    assert _admin_listed(admin_client, "Zanzibarquill") == {"the Zanzibarquill pot is blue", "the Zanzibarquill ferry"}
    assert _admin_listed(admin_client, "-Zanzibarquill") == {
        "call me about quokkaparade",
        "quokkaparade at noon",
        "harbourlantern",
    }
    encryption_rotate(settle=0)
    data_keys_retired_destroy()
    assert _admin_listed(admin_client, "Zanzibarquill") == {"the Zanzibarquill pot is blue", "the Zanzibarquill ferry"}
    assert _admin_listed(admin_client, "-Zanzibarquill") == {
        "call me about quokkaparade",
        "quokkaparade at noon",
        "harbourlantern",
    }


def _admin_listed(admin_client: Client, query: str) -> set[str]:
    response = admin_client.get("/admin/memoryapp/entry/", {"q": query})
    assert response.status_code == 200
    found = re.findall(
        r'<th class="field-entry_link"><a href="/admin/memoryapp/entry/([^/]+)/change/', response.content.decode()
    )
    return {Entry.objects.get(pk=pk.replace("_5F", "_")).content for pk in found}


def test_a_state_closed_during_the_walk_no_longer_holds_in_a_replay(encrypted: Any, db: None, alice: Caller) -> None:
    """A state the walk has not reached (its subject hashed under the retired blind key), closed by
    a new state (hashed under the new key): the replays of what memory knew match a state with its
    successor by `subject_hash`, so the write gives the slot's old states the new hash."""
    agent = Agent.objects.get(slug=alice.agent.slug)
    blue = _boat_is(agent, "blue")

    data_keys_retire()
    data_keys_forget()
    red = _boat_is(agent, "red")
    assert red.pk != blue.pk
    known = timezone.now()

    def replayed() -> list[str]:
        held = items_holding(agent=agent, user_id="u-ana", known_at=known)
        return sorted(i.value for i in held.filter(pk__in=[blue.pk, red.pk]))

    assert replayed() == ["red"]
    encryption_rotate(settle=0)
    data_keys_retired_destroy()
    data_keys_forget()
    assert replayed() == ["red"]
    assert len(set(MemoryItem.objects.filter(pk__in=[blue.pk, red.pk]).values_list("subject_hash", flat=True))) == 1


def _boat_is(agent: Agent, colour: str) -> MemoryItem:
    return item_write(
        agent=agent,
        kind="fact",
        subject="Ana's boat",
        attribute="colour",
        value=colour,
        trust="system",
        user_id="u-ana",
    )


def test_rows_under_two_retired_keys_are_found_and_the_owner_gets_one_new_live_key(
    encrypted: Any, db: None, alice: Caller
) -> None:
    """A rekey run stopped part way and run again: the agent then has two retired keys (rows under
    each) and, at its next use, one new live key."""
    _post(alice, TEXTS)
    data_keys_retire()
    data_keys_forget()
    _post(alice, ["harbourlantern at dawn"], thread_id="t2")  # under the second key
    data_keys_retire()
    data_keys_forget()

    assert _found(alice, "Zanzibarquill") == ["the Zanzibarquill pot is blue"]
    assert _found(alice, "harbourlantern") == ["harbourlantern at dawn"]
    agent = Agent.objects.get(slug=alice.agent.slug)
    assert len(envelope.blind_keys(agent_id=agent.pk)) == 3
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE retired_at IS NULL), count(*) FROM governance_datakey"
            " WHERE agent_id = %s AND user_id = '' AND destroyed_at IS NULL",
            [agent.pk],
        )
        assert cursor.fetchone() == (1, 3)

    encryption_rotate(settle=0)
    data_keys_retired_destroy()
    data_keys_forget()
    assert _found(alice, "Zanzibarquill") == ["the Zanzibarquill pot is blue"]
    assert _found(alice, "harbourlantern") == ["harbourlantern at dawn"]
    assert len(envelope.blind_keys(agent_id=agent.pk)) == 1


def _process_b(web: dict[str, Any]) -> None:
    """Process B: its caches as they were before the retire, its agent's key read a moment before
    it (still fresh: it knows the old blind key alone)."""
    _web_process_back(web, owner_cache_expired=False)
    now = time.monotonic()
    for owner, (_, key) in list(envelope._by_owner.items()):
        envelope._by_owner[owner] = (now, key)


def _boat_owner(agent: Agent, **kwargs: Any) -> MemoryItem:
    return item_write(
        agent=agent,
        kind="fact",
        subject="Ana's boat",
        attribute="owner",
        value="Ana",
        trust="system",
        user_id="u-ana",
        **kwargs,
    )


def test_two_processes_in_the_settle_leave_one_entity_the_walk_can_hash(
    encrypted: Any, db: None, alice: Caller
) -> None:
    """In the settle, a process that read its keys after the retire (A) and one that read them a
    moment before (B, its cache still fresh) each write a new subject's first fact. B looks the
    entity up under the old blind key only (it knows no other) and misses A's: before it makes a
    second one it reads its keys again (`lookup_keys_reread`), finds A's under the new key, and the
    walk has one entity to hash."""
    agent = Agent.objects.get(slug=alice.agent.slug)
    _boat_is(agent, "blue")  # the process holds the agent's and Ana's keys
    Entity.objects.filter(agent=agent).delete()
    MemoryItem.objects.filter(agent=agent).delete()
    web = _web_process_caches()

    data_keys_retire()
    data_keys_forget()  # A
    red = _boat_is(agent, "red")
    _process_b(web)
    owner = _boat_owner(agent)
    assert owner.entity_id == red.entity_id

    result = encryption_rotate(settle=0)
    data_keys_retired_destroy()
    assert Entity.objects.filter(agent=agent).count() == 1
    assert result["rows_merged"] == {}
    data_keys_forget()
    assert _boat_is(agent, "red").pk == red.pk
    assert _boat_owner(agent).pk == owner.pk


def test_two_processes_in_the_settle_leave_one_open_state_in_a_slot(encrypted: Any, db: None, alice: Caller) -> None:
    """The same race on one slot: A writes its first state under the new key, then B (the old key
    alone) finds the slot empty. The slot's lock has A's state committed by then: B reads its keys
    again before it adds a state with no predecessor, finds A's, and closes it; without that both
    stay open, in memory now and in every replay after the walk hashed them alike."""
    agent = Agent.objects.get(slug=alice.agent.slug)
    _boat_is(agent, "blue")  # the entity, under the old key: A finds it by the retired one, B by its own
    MemoryItem.objects.filter(agent=agent).delete()
    web = _web_process_caches()

    data_keys_retire()
    data_keys_forget()  # A
    red = _boat_is(agent, "red")
    _process_b(web)
    green = _boat_is(agent, "green")
    assert green.pk != red.pk
    known = timezone.now()

    def replayed() -> list[str]:
        held = items_holding(agent=agent, user_id="u-ana", known_at=known)
        return sorted(i.value for i in held.filter(attribute="colour"))

    assert replayed() == ["green"]
    encryption_rotate(settle=0)
    data_keys_retired_destroy()
    data_keys_forget()
    assert replayed() == ["green"]
    assert list(MemoryItem.objects.filter(agent=agent, valid_to__isnull=True).values_list("value", flat=True)) == [
        "green"
    ]
    assert _boat_is(agent, "green").pk == green.pk


def _said(caller: Caller) -> Entry:
    _post(caller, ["Ana's boat is moored at Harbour North"])
    return Entry.objects.get(agent__slug=caller.agent.slug, thread__external_id="t1")


def _moored(agent: Agent, entry: Entry) -> Relation:
    return relation_write(
        agent=agent,
        subject="Ana's boat",
        predicate="moored at",
        object="Harbour North",
        trust="system",
        scope=Scope(user_id="u-ana"),
        evidence=[{"entry_id": entry.pk, "quote": "moored at Harbour North"}],
    )


def _second_entities_made(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two processes in the settle, each writing a fact and an edge about new names: B reads its keys
    again before making an entity, but its read comes a moment before the retire commits (played
    by the read finding nothing new), which no lookup can close: it makes a second entity of each
    name under the old hash, with its fact, its edge and an other name."""
    agent = Agent.objects.get(slug=alice.agent.slug)
    entry = _said(alice)
    _boat_is(agent, "blue")
    Entity.objects.filter(agent=agent).delete()
    MemoryItem.objects.filter(agent=agent).delete()
    web = _web_process_caches()

    data_keys_retire()
    data_keys_forget()  # A
    red = _boat_is(agent, "red")
    edge_a = _moored(agent, entry)
    _process_b(web)
    with monkeypatch.context() as patched:
        patched.setattr(item_services, "lookup_keys_reread", lambda **kwargs: False)
        owner = _boat_owner(agent)
        edge_b = _moored(agent, entry)
    second = Entity.objects.get(pk=owner.entity_id)
    second.aliases = ["the dinghy"]
    second.save(update_fields=["aliases"])
    data_keys_forget()  # the rotation's process
    assert owner.entity_id != red.entity_id and edge_b.pk != edge_a.pk
    assert Entity.objects.filter(agent=agent).count() == 4
    return {"agent": agent, "red": red, "owner": owner}


def _one_of_each_name_after(agent: Agent, red: MemoryItem, owner: MemoryItem) -> None:
    """One entity of each name, every item on it and found by its slot, one edge with both quotes,
    the other name kept, and the replays of what memory knew as they were."""
    data_keys_forget()
    entities = {e.name: e for e in Entity.objects.filter(agent=agent)}  # names are sealed: read, not filtered
    assert sorted(entities) == ["Ana's boat", "Harbour North"]
    boat = entities["Ana's boat"]
    assert boat.aliases == ["the dinghy"]
    assert set(MemoryItem.objects.filter(agent=agent).values_list("entity_id", flat=True)) == {boat.pk}
    edge = Relation.objects.get(agent=agent)
    assert (edge.subject_id, edge.object_id) == (boat.pk, entities["Harbour North"].pk)
    assert RelationEvidence.objects.filter(relation=edge).count() == 2
    held = items_holding(agent=agent, user_id="u-ana", known_at=timezone.now())
    assert sorted((i.attribute, i.value) for i in held) == [("colour", "red"), ("owner", "Ana")]
    assert _boat_is(agent, "red").pk == red.pk
    assert _boat_owner(agent).pk == owner.pk
    assert Entity.objects.filter(agent=agent).count() == 2


@pytest.mark.parametrize("batch", [500, 1])
def test_the_walk_folds_entities_of_one_name_into_one(
    encrypted: Any, db: None, alice: Caller, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """The walk hashes both entities of a name alike: it folds the second into the first (in one
    batch, or into one walked before or written under the new key) instead of breaking on the
    unique name, and the rotation finishes."""
    made = _second_entities_made(alice, monkeypatch)
    result = encryption_rotate(settle=0, batch=batch)
    assert result["rows_merged"] == {"memoryapp_entity": 2}
    data_keys_retired_destroy()
    _one_of_each_name_after(made["agent"], made["red"], made["owner"])


def test_a_rekey_stopped_part_way_over_entities_of_one_name_runs_again(
    encrypted: Any, db: None, alice: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotation stopped part way runs again, with new keys once more (the entities are then under
    two retired blind keys, the first run's and the second's): it folds them and finishes."""
    made = _second_entities_made(alice, monkeypatch)
    # The walk, stopped after A's entity (hashed under the new key already: nothing to fold yet).
    rows_reseal(Entity.objects.filter(pk=made["red"].entity_id), rekey=True)

    result = encryption_rotate(settle=0, rekey=True)
    assert result["rows_merged"] == {"memoryapp_entity": 2}
    _one_of_each_name_after(made["agent"], made["red"], made["owner"])


def test_an_identifier_registered_twice_in_the_settle_is_kept_once(encrypted: Any, db: None, alice: Caller) -> None:
    """Two registrations of a person's identifiers in the settle, one per process, each under its
    blind key: the walk keeps one row of the identifier, and screening still finds her by it."""
    agent = Agent.objects.get(slug=alice.agent.slug)
    answered(alice.client.put("/api/v1/users/u-ana/identifiers", {"emails": ["ana@example.org"]}, format="json"), 200)
    web = _web_process_caches()
    data_keys_retire()
    data_keys_forget()  # A: its registration replaces hers (her rows deleted, one made)
    answered(alice.client.put("/api/v1/users/u-ana/identifiers", {"emails": ["ana@example.org"]}, format="json"), 200)
    _process_b(web)
    kind = IdentifierKind.EMAIL
    PersonIdentifier(
        agent=agent, user_id="u-ana", kind=kind, value="ana@example.org", lookup=identifier_key(kind, "ana@example.org")
    ).save(force_insert=True)
    assert PersonIdentifier.objects.filter(agent=agent).count() == 2

    result = encryption_rotate(settle=0)
    data_keys_retired_destroy()
    data_keys_forget()
    assert result["rows_merged"] == {"memoryapp_personidentifier": 1}
    assert PersonIdentifier.objects.filter(agent=agent).count() == 1
    assert identifiers_of(agent=agent, user_id="u-ana")["emails"] == ["ana@example.org"]


def test_every_unique_name_the_walk_hashes_has_a_merge() -> None:
    """A rotation refuses to start on a model whose unique constraint holds an equality column and
    that says nothing of how to fold two rows hashed alike: there is none, and entities are folded."""
    assert collisions_unmerged() == []
    assert hashed_unique(Entity) is not None and hashed_unique(MemoryItem) is None
