"""Threads as trees over the agent API: every operation, the database afterwards, audit rows."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from governance.models import AuditRecord
from memoryapp.models import Entry, Evidence, MemoryItem, Thread
from tests.kit.api import Caller, delete_ok, get_ok, patch_ok, post_entries, post_entry, post_ok, post_thread
from tests.kit.audit_names import audit_name
from tests.kit.factories import MemoryItemFactory

pytestmark = pytest.mark.django_db


def rome_tree(caller: Caller) -> dict[str, dict[str, Any]]:
    """question -> colosseum (active), question -> vatican (inactive)."""
    post_thread(caller, "rome", user_id="u-ana", metadata={"topic": "rome"})
    question = post_entry(caller, "rome", role="user", content="Plan a day in Rome")
    colosseum = post_entry(caller, "rome", role="assistant", content="Start at the Colosseum")
    vatican = post_entry(
        caller, "rome", role="assistant", content="Start at the Vatican", parent_id=question["id"], activate=False
    )
    return {"question": question, "colosseum": colosseum, "vatican": vatican}


def contents(payload: dict[str, Any]) -> list[Any]:
    return [e["content"] for e in payload["results"]]


# --- threads -------------------------------------------------------------------------------


def test_create_thread_answers_201_and_stores_it(alice: Caller) -> None:
    response = alice.client.post(
        "/api/v1/threads", {"id": "t1", "user_id": "u-ana", "metadata": {"topic": "rome"}}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert body["id"] == "t1" and body["user_id"] == "u-ana" and body["metadata"] == {"topic": "rome"}
    thread = Thread.objects.get(agent=alice.agent, external_id="t1")
    assert thread.metadata == {"topic": "rome"} and thread.active_leaf_id is None


def test_create_thread_again_is_an_upsert_keeping_entries_and_created_at(alice: Caller) -> None:
    first = post_thread(alice, "t1", metadata={"topic": "rome"})
    post_entry(alice, "t1", role="user", content="hi")
    response = alice.client.post("/api/v1/threads", {"id": "t1", "metadata": {"mood": "calm"}}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["created_at"] == first["created_at"]
    assert body["metadata"] == {"topic": "rome", "mood": "calm"}
    assert Thread.objects.filter(agent=alice.agent, external_id="t1").count() == 1
    assert Entry.objects.filter(thread__external_id="t1").count() == 1


def test_an_upsert_merges_like_patch_and_never_grows_metadata_past_its_limit(alice: Caller) -> None:
    post_thread(alice, "big", metadata={"a": "x" * 40_000, "gone": 1})
    again = alice.client.post("/api/v1/threads", {"id": "big", "metadata": {"gone": None}}, format="json")
    assert again.status_code == 200 and set(again.json()["metadata"]) == {"a"}
    response = alice.client.post("/api/v1/threads", {"id": "big", "metadata": {"b": "y" * 40_000}}, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "metadata_too_large"
    assert response.json()["error"]["field"] == "metadata"
    assert set(Thread.objects.get(agent=alice.agent, external_id="big").metadata) == {"a"}


def test_create_thread_without_id_gets_a_generated_one(alice: Caller) -> None:
    response = alice.client.post("/api/v1/threads", {}, format="json")
    assert response.status_code == 201
    assert response.json()["id"].startswith("thr_")


def test_two_agents_may_use_the_same_thread_id(alice: Caller, bob: Caller) -> None:
    post_thread(alice, "same")
    post_thread(bob, "same")
    assert Thread.objects.filter(external_id="same").count() == 2


def test_get_and_patch_thread_merge_metadata_and_remove_null_keys(alice: Caller) -> None:
    post_thread(alice, "t1", metadata={"topic": "rome", "old": 1})
    response = alice.client.patch(
        "/api/v1/threads/t1", {"metadata": {"resolved": True, "old": None}, "user_id": "u-bo"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["metadata"] == {"topic": "rome", "resolved": True}
    thread = Thread.objects.get(external_id="t1")
    assert thread.metadata == {"topic": "rome", "resolved": True} and thread.user_id == "u-bo"
    assert get_ok(alice.client, "/api/v1/threads/t1")["user_id"] == "u-bo"


def test_delete_thread_removes_its_entries_with_the_items_standing_on_them_and_audits(alice: Caller) -> None:
    tree = rome_tree(alice)
    item = MemoryItemFactory(
        agent=alice.agent, value="likes Rome", evidence=[{"entry_id": tree["question"]["id"], "quote": "Rome"}]
    )
    response = alice.client.delete("/api/v1/threads/rome")
    assert response.status_code == 204
    assert not Thread.objects.filter(external_id="rome").exists()
    assert not Entry.objects.filter(agent=alice.agent).exists()
    # The item stood only on the thread's entries: it goes with them (tests/threads/test_lineage.py).
    assert not MemoryItem.objects.filter(pk=item.pk).exists() and not Evidence.objects.exists()
    record = AuditRecord.objects.get(action="thread.delete")
    named = audit_name(agent_id=alice.agent.pk, user_id="u-ana", value="rome")
    assert record.subject == named != "rome" and record.details == {"entries": 3, "fork_copies": 0}
    assert alice.client.get("/api/v1/threads/rome").status_code == 404


def test_list_threads_newest_updated_first_with_cursor_paging(alice: Caller) -> None:
    for index in range(5):
        post_thread(alice, f"t{index}")
    post_entry(alice, "t1", role="user", content="an entry")  # 004: entries do not move updatedAt
    patch_ok(alice.client, "/api/v1/threads/t2", {"metadata": {"mood": "calm"}})  # metadata does: t2 moves first
    first = get_ok(alice.client, "/api/v1/threads?limit=2")
    assert [t["id"] for t in first["results"]] == ["t2", "t4"]
    assert first["next"]
    second = get_ok(alice.client, first["next"])
    assert [t["id"] for t in second["results"]] == ["t3", "t1"]
    third = get_ok(alice.client, second["next"])
    assert [t["id"] for t in third["results"]] == ["t0"] and third["next"] is None


def test_list_threads_filters_metadata_by_type_user_and_update_time(alice: Caller, bob: Caller) -> None:
    post_thread(alice, "n1", user_id="u-ana", metadata={"n": 1, "tag": "a"})
    post_thread(alice, "n2", user_id="u-bo", metadata={"n": "1", "tag": "a"})
    post_thread(bob, "n3", user_id="u-ana", metadata={"n": 1})
    by_number = get_ok(alice.client, "/api/v1/threads", {"metadata": json.dumps({"n": 1})})
    assert [t["id"] for t in by_number["results"]] == ["n1"]
    by_text = get_ok(alice.client, "/api/v1/threads", {"metadata": json.dumps({"n": "1"})})
    assert [t["id"] for t in by_text["results"]] == ["n2"]
    by_user = get_ok(alice.client, "/api/v1/threads", {"user_id": "u-ana"})
    assert [t["id"] for t in by_user["results"]] == ["n1"]
    n1_updated = Thread.objects.get(external_id="n1").updated_at.isoformat()
    after = get_ok(alice.client, "/api/v1/threads", {"updated_after": n1_updated})
    assert [t["id"] for t in after["results"]] == ["n2"]
    before = get_ok(alice.client, "/api/v1/threads", {"updated_before": n1_updated})
    assert before["results"] == []


def test_list_threads_metadata_values_must_be_equal_not_merely_contained(alice: Caller) -> None:
    post_thread(alice, "m1", metadata={"tags": ["a", "b"], "o": {"x": 1, "y": 2}})
    post_thread(alice, "m2", metadata={"tags": ["a"], "o": {}})
    for wanted, ids in (
        ({"tags": ["a"]}, ["m2"]),
        ({"tags": ["a", "b"]}, ["m1"]),
        ({"o": {}}, ["m2"]),
        ({"o": {"x": 1}}, []),
        ({"tags": []}, []),
    ):
        found = get_ok(alice.client, "/api/v1/threads", {"metadata": json.dumps(wanted)})["results"]
        assert [t["id"] for t in found] == ids, wanted


def test_the_next_page_keeps_the_filters_of_the_first(alice: Caller) -> None:
    for n in range(3):
        post_thread(alice, f"ana-{n}", user_id="u-ana")
        post_thread(alice, f"bo-{n}", user_id="u-bo")
    first = get_ok(alice.client, "/api/v1/threads", {"user_id": "u-ana", "limit": 2})
    cursor = first["next_cursor"]
    rest = get_ok(alice.client, "/api/v1/threads", {"cursor": cursor})
    assert [t["id"] for t in first["results"] + rest["results"]] == ["ana-2", "ana-1", "ana-0"]
    followed = get_ok(alice.client, first["next"])  # the link repeats the filters: the same page
    assert [t["id"] for t in followed["results"]] == ["ana-0"]
    dated = get_ok(
        alice.client,
        "/api/v1/threads",
        {"metadata": json.dumps({}), "updated_after": "2000-01-01T00:00:00Z", "limit": 1},
    )
    assert alice.client.get(dated["next"]).status_code == 200
    other = alice.client.get("/api/v1/threads", {"cursor": cursor, "user_id": "u-bo"})
    assert other.status_code == 400 and other.json()["error"]["field"] == "cursor"


def test_list_filters_on_number_like_keys_and_pages_with_large_filters(
    alice: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    post_thread(alice, "y1", metadata={"2024": "x", "note": "n" * 1500})
    post_thread(alice, "y2", metadata={"2024": "x", "note": "n" * 1500})
    found = get_ok(alice.client, "/api/v1/threads", {"metadata": json.dumps({"2024": "x"})})["results"]
    assert sorted(t["id"] for t in found) == ["y1", "y2"]
    # Filters too large to ride in the cursor: the next link (which repeats them) still works,
    # the cursor alone asks for them again.
    first = get_ok(alice.client, "/api/v1/threads", {"metadata": json.dumps({"note": "n" * 1500}), "limit": 1})
    assert len(first["next_cursor"]) < 200
    assert [t["id"] for t in get_ok(alice.client, first["next"])["results"]] == ["y1"]
    alone = alice.client.get("/api/v1/threads", {"cursor": first["next_cursor"]})
    assert alone.status_code == 400 and alone.json()["error"]["field"] == "cursor"


def test_limit_zero_is_all_entries_up_to_what_one_answer_holds(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    from memoryapp.threads import selectors as thread_selectors

    post_thread(alice, "t1")
    post_entries(alice, "t1", [{"role": "user", "content": f"n{i}"} for i in range(5)])
    monkeypatch.setattr(thread_selectors, "ALL_ENTRIES_MAX", 3)
    page = get_ok(alice.client, "/api/v1/threads/t1/entries?limit=0")
    assert [e["seq"] for e in page["results"]] == [3, 4, 5] and page["next"]
    assert [e["seq"] for e in get_ok(alice.client, page["next"])["results"]] == [1, 2]


def test_list_threads_refuses_bad_filters(alice: Caller) -> None:
    for query in ({"limit": "0"}, {"limit": "5000"}, {"metadata": "[1]"}, {"metadata": "{no"}, {"cursor": "%%%"}):
        response = alice.client.get("/api/v1/threads", query)
        assert response.status_code == 400, query
        assert response.json()["error"]["field"] in ("limit", "metadata", "cursor")


# --- entries -------------------------------------------------------------------------------


def test_add_entry_goes_after_the_active_leaf_and_moves_it(alice: Caller) -> None:
    post_thread(alice, "t1")
    first = post_entry(alice, "t1", role="user", content="hello", sender_name="Ana")
    second = post_entry(alice, "t1", role="assistant", content=[{"type": "text", "text": "hi Ana"}])
    assert first["parent_id"] is None and second["parent_id"] == first["id"]
    assert (first["seq"], second["seq"]) == (1, 2)
    assert first["token_count"] > 0 and len(first["content_hash"]) == 32
    thread = Thread.objects.get(external_id="t1")
    assert thread.active_leaf_id == second["id"] and thread.next_seq == 3
    stored = Entry.objects.get(id=second["id"])
    assert stored.text == "hi Ana" and stored.agent_id == alice.agent.pk


def test_add_entry_under_a_parent_without_activate_leaves_the_leaf(alice: Caller) -> None:
    tree = rome_tree(alice)
    thread = Thread.objects.get(external_id="rome")
    assert thread.active_leaf_id == tree["colosseum"]["id"]
    assert tree["vatican"]["parent_id"] == tree["question"]["id"]


def test_tool_result_takes_the_tool_name_from_the_call_on_its_branch(alice: Caller) -> None:
    post_thread(alice, "t1")
    call = post_entry(
        alice,
        "t1",
        role="assistant",
        content=None,
        tool_calls=[{"id": "call-1", "name": "weather", "arguments": {"city": "Rome"}}],
    )
    result = post_entry(alice, "t1", type="tool_result", content="sunny", tool_call_id="call-1")
    assert call["tool_calls"] == [{"id": "call-1", "name": "weather", "arguments": {"city": "Rome"}}]
    assert result["role"] == "tool" and result["tool_name"] == "weather" and result["tool_call_id"] == "call-1"
    assert "weather" in Entry.objects.get(id=call["id"]).text


def test_batch_add_chains_entries_in_one_transaction(alice: Caller) -> None:
    post_thread(alice, "t1")
    head = post_entry(alice, "t1", role="user", content="start")
    batch = [{"role": "assistant" if i % 2 else "user", "content": f"n{i}"} for i in range(10)]
    response = alice.client.post("/api/v1/threads/t1/entries", {"entries": batch}, format="json")
    assert response.status_code == 201
    created = response.json()["entries"]
    assert [e["seq"] for e in created] == list(range(2, 12))
    assert created[0]["parent_id"] == head["id"]
    assert all(b["parent_id"] == a["id"] for a, b in itertools.pairwise(created))
    assert Thread.objects.get(external_id="t1").active_leaf_id == created[-1]["id"]


def test_a_bad_entry_in_a_batch_writes_nothing_and_names_it(alice: Caller) -> None:
    post_thread(alice, "t1")
    batch = [{"role": "user", "content": "fine"}, {"role": "user", "content": None}]
    response = alice.client.post("/api/v1/threads/t1/entries", {"entries": batch}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["field"].startswith("entries[1]")
    assert not Entry.objects.exists()
    assert Thread.objects.get(external_id="t1").next_seq == 1


def test_get_entries_reads_every_branch_and_events_only_when_asked(alice: Caller) -> None:
    tree = rome_tree(alice)
    post_entry(alice, "rome", type="label", event={"label": "checkpoint"})
    default = get_ok(alice.client, "/api/v1/threads/rome/entries")
    assert [e["id"] for e in default["results"]] == [tree[k]["id"] for k in ("question", "colosseum", "vatican")]
    everything = get_ok(alice.client, "/api/v1/threads/rome/entries?types=all")
    assert [e["type"] for e in everything["results"]][-1] == "label"
    labels = get_ok(alice.client, "/api/v1/threads/rome/entries?types=label")
    assert [e["event"] for e in labels["results"]] == [{"label": "checkpoint"}]
    assert alice.client.get("/api/v1/threads/rome/entries?types=bogus").status_code == 400


def test_get_entries_pages_with_next_links(alice: Caller) -> None:
    post_thread(alice, "t1")
    post_entries(
        alice, "t1", [{"role": "user", "content": f"n{i}", "created_at": f"2026-01-01T00:00:0{i}Z"} for i in range(7)]
    )
    # 004 getEntries: the most recent `limit`, oldest first; `next` holds the ones before.
    pages: list[list[int]] = []
    url: str | None = "/api/v1/threads/t1/entries?limit=3"
    while url:
        page = get_ok(alice.client, url)
        pages.append([e["seq"] for e in page["results"]])
        url = page["next"]
    assert pages == [[5, 6, 7], [2, 3, 4], [1]]
    everything = get_ok(alice.client, "/api/v1/threads/t1/entries?limit=0")
    assert [e["seq"] for e in everything["results"]] == list(range(1, 8)) and everything["next"] is None
    fifth = Entry.objects.get(thread__external_id="t1", seq=5).created_at.isoformat()
    bounded = get_ok(alice.client, "/api/v1/threads/t1/entries", {"before": fifth, "limit": 2})
    assert [e["seq"] for e in bounded["results"]] == [3, 4]
    later = get_ok(alice.client, "/api/v1/threads/t1/entries", {"after": fifth})
    assert [e["seq"] for e in later["results"]] == [6, 7]


def test_get_entry_by_id(alice: Caller) -> None:
    tree = rome_tree(alice)
    response = alice.client.get(f"/api/v1/entries/{tree['vatican']['id']}")
    assert response.status_code == 200
    body = response.json()
    assert body["content"] == "Start at the Vatican" and body["thread_id"] == "rome" and body["seq"] == 3


# --- path ----------------------------------------------------------------------------------


def test_path_reads_the_active_branch_or_another_leaf(alice: Caller) -> None:
    tree = rome_tree(alice)
    active = get_ok(alice.client, "/api/v1/threads/rome/path")
    assert contents(active) == ["Plan a day in Rome", "Start at the Colosseum"]
    other = get_ok(alice.client, f"/api/v1/threads/rome/path?leaf={tree['vatican']['id']}")
    assert contents(other) == ["Plan a day in Rome", "Start at the Vatican"]


def test_path_gives_the_newest_limit_and_pages_back_with_before(alice: Caller) -> None:
    post_thread(alice, "t1")
    post_entries(alice, "t1", [{"role": "user", "content": f"n{i}"} for i in range(7)])
    page = get_ok(alice.client, "/api/v1/threads/t1/path?limit=3")
    assert contents(page) == ["n4", "n5", "n6"]
    older = get_ok(alice.client, page["next"])
    assert contents(older) == ["n1", "n2", "n3"]
    oldest = get_ok(alice.client, older["next"])
    assert contents(oldest) == ["n0"] and oldest["next"] is None


def test_path_shows_events_only_when_types_asks(alice: Caller) -> None:
    post_thread(alice, "t1")
    post_entry(alice, "t1", role="user", content="hi")
    post_entry(alice, "t1", type="model_change", event={"model": "m2"})
    post_entry(alice, "t1", role="assistant", content="hello")
    assert contents(get_ok(alice.client, "/api/v1/threads/t1/path")) == ["hi", "hello"]
    everything = get_ok(alice.client, "/api/v1/threads/t1/path?types=all")
    assert [e["type"] for e in everything["results"]] == ["message", "model_change", "message"]


@pytest.mark.parametrize("limit", ["0", "1001", "-3", "many"])
def test_path_limit_out_of_range_is_a_400_naming_limit(alice: Caller, limit: str) -> None:
    post_thread(alice, "t1")
    response = alice.client.get(f"/api/v1/threads/t1/path?limit={limit}")
    assert response.status_code == 400 and response.json()["error"]["field"] == "limit"


def test_path_with_unknown_leaf_or_before_off_the_branch_is_a_400(alice: Caller) -> None:
    tree = rome_tree(alice)
    response = alice.client.get("/api/v1/threads/rome/path?leaf=ent_nope")
    assert response.status_code == 400 and response.json()["error"]["field"] == "leaf"
    response = alice.client.get(f"/api/v1/threads/rome/path?before={tree['vatican']['id']}")
    assert response.status_code == 400 and response.json()["error"]["field"] == "before"


# --- rewind, checkout, fork ------------------------------------------------------------------


def test_rewind_moves_leaf_and_deletes_nothing(alice: Caller) -> None:
    tree = rome_tree(alice)
    response = alice.client.post("/api/v1/threads/rome/rewind", {"entry_id": tree["question"]["id"]}, format="json")
    assert response.status_code == 200 and response.json()["active_leaf_id"] == tree["question"]["id"]
    assert Entry.objects.filter(thread__external_id="rome").count() == 3
    assert AuditRecord.objects.filter(action="thread.rewind", subject=tree["question"]["id"]).exists()
    after = post_entry(alice, "rome", role="assistant", content="Or the Pantheon")
    assert after["parent_id"] == tree["question"]["id"]


def test_rewind_to_an_entry_off_the_active_branch_is_refused(alice: Caller) -> None:
    tree = rome_tree(alice)
    response = alice.client.post("/api/v1/threads/rome/rewind", {"entry_id": tree["vatican"]["id"]}, format="json")
    assert response.status_code == 400 and response.json()["error"]["field"] == "entry_id"
    assert Thread.objects.get(external_id="rome").active_leaf_id == tree["colosseum"]["id"]
    assert not AuditRecord.objects.filter(action="thread.rewind").exists()


def test_checkout_makes_any_branch_the_active_one(alice: Caller) -> None:
    tree = rome_tree(alice)
    response = alice.client.post("/api/v1/threads/rome/checkout", {"entry_id": tree["vatican"]["id"]}, format="json")
    assert response.status_code == 200
    assert contents(get_ok(alice.client, "/api/v1/threads/rome/path"))[-1] == "Start at the Vatican"
    bad = alice.client.post("/api/v1/threads/rome/checkout", {"entry_id": "ent_nope"}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "entry_id"


def test_checkout_refuses_an_entry_of_another_thread(alice: Caller) -> None:
    rome_tree(alice)
    post_thread(alice, "other")
    stranger = post_entry(alice, "other", role="user", content="elsewhere")
    response = alice.client.post("/api/v1/threads/rome/checkout", {"entry_id": stranger["id"]}, format="json")
    assert response.status_code == 400


def test_fork_copies_the_branch_with_lineage_in_metadata(alice: Caller) -> None:
    tree = rome_tree(alice)
    response = alice.client.post(
        "/api/v1/threads/rome/fork", {"entry_id": tree["vatican"]["id"], "new_thread_id": "rome-vatican"}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert body["id"] == "rome-vatican" and body["forked_from"] == "rome"
    assert body["metadata"] == {"topic": "rome", "forkedFrom": "rome"} and body["user_id"] == "u-ana"
    path = get_ok(alice.client, "/api/v1/threads/rome-vatican/path")["results"]
    assert [e["content"] for e in path] == ["Plan a day in Rome", "Start at the Vatican"]
    assert [e["metadata"]["forkOf"] for e in path] == [tree["question"]["id"], tree["vatican"]["id"]]
    assert all(e["id"] not in (tree["question"]["id"], tree["vatican"]["id"]) for e in path)
    assert [e["seq"] for e in path] == [1, 2]
    origin = Thread.objects.get(external_id="rome")
    assert origin.metadata["memoryForks"] == ["rome-vatican"]
    copy = Thread.objects.get(external_id="rome-vatican")
    assert copy.forked_from_id == origin.pk and copy.next_seq == 3
    named = audit_name(agent_id=alice.agent.pk, user_id="u-ana", value="rome-vatican")
    assert AuditRecord.objects.filter(action="thread.fork", subject=named).exists()


def test_deleting_a_fork_takes_its_name_out_of_the_origins_forks(alice: Caller) -> None:
    tree = rome_tree(alice)
    for name in ("rome-vatican", "rome-other"):
        post_ok(alice.client, "/api/v1/threads/rome/fork", {"entry_id": tree["vatican"]["id"], "new_thread_id": name})
    assert Thread.objects.get(external_id="rome").metadata["memoryForks"] == ["rome-vatican", "rome-other"]

    assert alice.client.delete("/api/v1/threads/rome-vatican").status_code == 204

    origin = Thread.objects.get(external_id="rome")
    assert origin.metadata["memoryForks"] == ["rome-other"] and origin.metadata["topic"] == "rome"
    assert get_ok(alice.client, "/api/v1/threads/rome")["metadata"]["memoryForks"] == ["rome-other"]


def test_fork_into_a_taken_id_is_a_409_and_writes_nothing(alice: Caller) -> None:
    tree = rome_tree(alice)
    post_thread(alice, "taken")
    response = alice.client.post(
        "/api/v1/threads/rome/fork", {"entry_id": tree["vatican"]["id"], "new_thread_id": "taken"}, format="json"
    )
    assert response.status_code == 409
    assert "memoryForks" not in Thread.objects.get(external_id="rome").metadata


# --- delete and redact -----------------------------------------------------------------------


def test_delete_entry_splices_children_to_its_parent(alice: Caller) -> None:
    post_thread(alice, "t1")
    a = post_entry(alice, "t1", role="user", content="a")
    b = post_entry(alice, "t1", role="assistant", content="b")
    c = post_entry(alice, "t1", role="user", content="c")
    item = MemoryItemFactory(agent=alice.agent, value="b", evidence=[{"entry_id": b["id"], "quote": "b"}])
    delete_ok(alice.client, f"/api/v1/entries/{b['id']}")
    assert Entry.objects.get(id=c["id"]).parent_id == a["id"]
    assert contents(get_ok(alice.client, "/api/v1/threads/t1/path")) == ["a", "c"]
    assert not MemoryItem.objects.filter(pk=item.pk).exists()  # it stood only on b (tests/threads/test_lineage.py)
    assert AuditRecord.objects.filter(action="entry.delete", subject=b["id"]).exists()
    assert alice.client.get(f"/api/v1/entries/{b['id']}").status_code == 404


def test_delete_of_the_leaf_moves_the_leaf_to_its_parent(alice: Caller) -> None:
    tree = rome_tree(alice)
    alice.client.delete(f"/api/v1/entries/{tree['colosseum']['id']}")
    assert Thread.objects.get(external_id="rome").active_leaf_id == tree["question"]["id"]


def test_redact_keeps_place_and_call_ids_and_replaces_what_was_said(alice: Caller) -> None:
    post_thread(alice, "t1")
    q = post_entry(alice, "t1", role="user", content="My card is 4111", sender_name="Ana")
    call = post_entry(
        alice, "t1", role="assistant", tool_calls=[{"id": "c1", "name": "pay", "arguments": {"card": "4111"}}]
    )
    result = post_entry(
        alice, "t1", type="tool_result", content=[{"type": "tool_result", "content": "paid 4111"}], tool_call_id="c1"
    )
    Entry.objects.filter(id=q["id"]).update(embedding=[0.1] * 384)
    response = alice.client.post(f"/api/v1/entries/{q['id']}/redact", {"reason": "card number"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["content"] == "[redacted]" and "sender_name" not in body and body["seq"] == 1
    assert body["metadata"]["redacted"]["reason"] == "card number"
    stored = Entry.objects.get(id=q["id"])
    assert stored.text == "[redacted]" and stored.redacted_at is not None and stored.embedding is None
    assert stored.role == "user" and stored.parent_id is None
    alice.client.post(f"/api/v1/entries/{call['id']}/redact", {}, format="json")
    alice.client.post(f"/api/v1/entries/{result['id']}/redact", {}, format="json")
    stored_call = Entry.objects.get(id=call["id"])
    assert stored_call.tool_calls == [{"id": "c1", "name": "pay", "arguments": "[redacted]"}]
    stored_result = Entry.objects.get(id=result["id"])
    assert stored_result.tool_call_id == "c1" and "4111" not in json.dumps(stored_result.content)
    assert stored_result.parent_id == call["id"]
    # The call and its result were the question's replies: one cascade redacted all three (004).
    record = AuditRecord.objects.get(action="entry.redact")
    assert record.details["redacted"] == 3 and record.subject == "3 entries"
    assert "4111" not in json.dumps(list(AuditRecord.objects.values("details", "subject")))


def test_redact_refuses_event_entries(alice: Caller) -> None:
    post_thread(alice, "t1")
    label = post_entry(alice, "t1", type="label", event={"label": "x"})
    response = alice.client.post(f"/api/v1/entries/{label['id']}/redact", {}, format="json")
    assert response.status_code == 400
    assert Entry.objects.get(id=label["id"]).redacted_at is None


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"role": "user", "content": "x", "parent_id": "no-such-entry"}, "parent_id"),
        ({"role": 7, "content": "x"}, "role"),
        ({"content": None}, "content"),
        ({"role": "user", "content": None}, "content"),
        ({"role": "user", "content": {"not": "allowed"}}, "content"),
        ({"role": "user", "content": [1, 2]}, "content[0]"),
        ({"role": "user", "content": "x", "type": "poem"}, "type"),
        ({"role": "user", "content": "x", "activate": "maybe"}, "activate"),
        ({"role": "user", "content": "x", "token_count": -1}, "token_count"),
        ({"role": "user", "content": "x", "tool_calls": "call"}, "tool_calls"),
        ({"role": "assistant", "tool_calls": [{"name": "f"}]}, "tool_calls[0].id"),
        ({"role": "user", "content": "x", "colour": "red"}, "colour"),
        ({"type": "tool_result", "content": "x"}, "tool_call_id"),
        ({"role": "user", "content": "x", "metadata": [1]}, "metadata"),
        ({"type": "label"}, "event"),
    ],
)
def test_bad_entry_input_is_a_400_naming_the_field_and_writes_nothing(
    alice: Caller, body: dict[str, Any], field: str
) -> None:
    post_thread(alice, "t1")
    response = alice.client.post("/api/v1/threads/t1/entries", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == field
    assert not Entry.objects.exists()


def test_a_parent_in_another_thread_is_refused(alice: Caller) -> None:
    post_thread(alice, "t1")
    post_thread(alice, "t2")
    elsewhere = post_entry(alice, "t2", role="user", content="x")
    response = alice.client.post(
        "/api/v1/threads/t1/entries", {"role": "user", "content": "y", "parent_id": elsewhere["id"]}, format="json"
    )
    assert response.status_code == 400 and response.json()["error"]["field"] == "parent_id"
    assert not Entry.objects.filter(thread__external_id="t1").exists()


def test_malformed_json_is_a_400(alice: Caller) -> None:
    post_thread(alice, "t1")
    response = alice.client.generic("POST", "/api/v1/threads/t1/entries", b"{not json", content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "malformed_json"


def test_an_entry_over_one_mebibyte_is_a_413_with_its_own_code(alice: Caller) -> None:
    post_thread(alice, "t1")
    response = alice.client.post(
        "/api/v1/threads/t1/entries", {"role": "user", "content": "x" * (1024 * 1024 + 1)}, format="json"
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "entry_too_large"
    assert not Entry.objects.exists()


def test_a_batch_over_a_thousand_entries_is_a_413(alice: Caller) -> None:
    post_thread(alice, "t1")
    batch = [{"role": "user", "content": "x"}] * 1001
    response = alice.client.post("/api/v1/threads/t1/entries", {"entries": batch}, format="json")
    assert response.status_code == 413 and response.json()["error"]["code"] == "batch_too_large"
    assert not Entry.objects.exists()


def test_adding_to_a_missing_thread_is_a_404(alice: Caller) -> None:
    response = alice.client.post("/api/v1/threads/nope/entries", {"role": "user", "content": "x"}, format="json")
    assert response.status_code == 404


# --- isolation -------------------------------------------------------------------------------


def test_another_agent_gets_404_on_every_thread_and_entry_endpoint(alice: Caller, mallory: Caller) -> None:
    tree = rome_tree(alice)
    entry_id = tree["question"]["id"]
    calls = [
        ("get", "/api/v1/threads/rome", None),
        ("patch", "/api/v1/threads/rome", {"metadata": {"x": 1}}),
        ("delete", "/api/v1/threads/rome", None),
        ("post", "/api/v1/threads/rome/entries", {"role": "user", "content": "x"}),
        ("get", "/api/v1/threads/rome/entries", None),
        ("get", "/api/v1/threads/rome/path", None),
        ("post", "/api/v1/threads/rome/rewind", {"entry_id": entry_id}),
        ("post", "/api/v1/threads/rome/checkout", {"entry_id": entry_id}),
        ("post", "/api/v1/threads/rome/fork", {"entry_id": entry_id}),
        ("get", "/api/v1/threads/rome/export", None),
        ("get", f"/api/v1/entries/{entry_id}", None),
        ("delete", f"/api/v1/entries/{entry_id}", None),
        ("post", f"/api/v1/entries/{entry_id}/redact", {}),
    ]
    for method, url, body in calls:
        response = getattr(mallory.client, method)(url, body, format="json")
        assert response.status_code == 404, (method, url, response.status_code)
        assert response.json()["error"]["code"] == "not_found"
    assert get_ok(mallory.client, "/api/v1/threads")["results"] == []
    assert Entry.objects.filter(thread__external_id="rome").count() == 3
    assert Thread.objects.get(external_id="rome").metadata == {"topic": "rome"}


def test_an_entry_of_mine_cannot_be_used_as_a_parent_in_anothers_thread(alice: Caller, mallory: Caller) -> None:
    tree = rome_tree(alice)
    post_thread(mallory, "m1")
    response = mallory.client.post(
        "/api/v1/threads/m1/entries",
        {"role": "user", "content": "x", "parent_id": tree["question"]["id"]},
        format="json",
    )
    assert response.status_code == 400
    forked = mallory.client.post("/api/v1/threads/m1/fork", {"entry_id": tree["question"]["id"]}, format="json")
    assert forked.status_code == 400


def test_anonymous_callers_are_refused(anonymous: Any) -> None:
    assert anonymous.get("/api/v1/threads").status_code == 401
