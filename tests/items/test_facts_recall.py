"""Facts recalled into a context by count (002 `recall`) and found by meaning (002 `Memory.semantic`)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from memoryapp.models import MemoryItem
from memoryapp.search import embedders
from tests.kit.api import Caller, build_context, get_ok
from tests.kit.factories import ThreadFactory
from tests.kit.recall import FailingEmbedder, embedded

FACTS = [
    ("hobby", "cooks pasta every sunday"),
    ("city", "lives in Porto near the river"),
    ("job", "works as a nurse at the hospital"),
    ("pet", "has a cat called Miso"),
    ("car", "drives an old blue van"),
    ("sport", "plays tennis on tuesdays"),
]


def _remember(caller: Caller, facts: list[tuple[str, str]], namespace: str = "users/u-ana") -> dict[str, str]:
    """Each fact after the one before (so the last is the newest); ids by key."""
    ids = {}
    for key, value in facts:
        answer = caller.client.put(f"/api/v1/facts/{namespace}/{key}", {"value": value}, format="json")
        assert answer.status_code == 200, answer.json()
        ids[key] = MemoryItem.objects.get(agent=caller.agent, attribute=f"core:{key}", status="active").id
    return ids


def _search(caller: Caller, namespace: str, **params: Any) -> dict[str, Any]:
    return dict(get_ok(caller.client, f"/api/v1/facts/{namespace}", params))


# --- search by meaning ----------------------------------------------------------------------------


def test_a_fact_is_found_by_meaning_when_its_words_differ_and_hybrid_says_how(alice: Caller) -> None:
    _remember(alice, FACTS)
    embedded(alice.agent)  # the embedding job gives the facts their vectors

    by_words = _search(alice, "users", q="cooking", mode="keyword")
    by_meaning = _search(alice, "users", q="cooking", mode="semantic")
    both = _search(alice, "users", q="cooking")
    worded = _search(alice, "users", q="pasta on sunday")

    assert by_words["results"] == [] and by_words["mode"] == "keyword"
    assert [r["key"] for r in by_meaning["results"]][:1] == ["hobby"]
    assert by_meaning["results"][0]["matched_by"] == ["vector"] and 0.3 <= by_meaning["results"][0]["score"] <= 1
    assert both["mode"] == "hybrid" and both["errors"] == []
    assert both["results"][0]["key"] == "hobby" and both["results"][0]["matched_by"] == ["vector"]
    first = worded["results"][0]
    assert first["key"] == "hobby" and first["matched_by"][0] == "keyword" and first["score"] == 1.0


def test_a_failing_embedder_falls_back_to_words_and_says_so(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    _remember(alice, FACTS)
    embedded(alice.agent)
    monkeypatch.setattr(embedders, "embedder", lambda: FailingEmbedder("embedding endpoint answered 429"))
    embedders.query_cache_clear()

    answer = _search(alice, "users", q="tennis cooking", mode="semantic")

    assert answer["mode"] == "keyword" and "429" in answer["errors"][0]["message"]
    assert [(r["key"], r["score"], r["matched_by"]) for r in answer["results"]] == [("sport", 0.5, ["keyword"])]


def test_a_bad_mode_is_a_400_naming_mode(alice: Caller) -> None:
    answer = alice.client.get("/api/v1/facts/users", {"q": "x", "mode": "fuzzy"})
    assert answer.status_code == 400 and answer.json()["error"]["field"] == "mode"


def test_another_agents_facts_are_never_found_by_meaning(alice: Caller, mallory: Caller) -> None:
    _remember(alice, FACTS)
    embedded(alice.agent)

    assert _search(mallory, "users", q="cooking", mode="semantic")["results"] == []
    assert _search(mallory, "users/u-ana", q="cook pasta")["results"] == []


def test_the_search_memory_tool_finds_by_meaning(alice: Caller) -> None:
    _remember(alice, FACTS)
    embedded(alice.agent)
    body = {"name": "search_memory", "input": {"query": "cooking"}, "user_id": "u-ana"}

    hybrid = alice.client.post("/api/v1/memory-tools", body, format="json").json()
    words = alice.client.post(
        "/api/v1/memory-tools", {**body, "input": {"query": "cooking", "mode": "keyword"}}, format="json"
    ).json()
    wrong = alice.client.post(
        "/api/v1/memory-tools", {**body, "input": {"query": "cooking", "mode": "psychic"}}, format="json"
    ).json()

    assert "hobby: cooks pasta every sunday" in hybrid["result"]
    assert words["result"] == "No memories matched."
    assert wrong["is_error"] and "mode must be one of" in wrong["result"]
    listed = get_ok(alice.client, "/api/v1/memory-tools")["tools"]
    schema = next(t for t in listed if t["name"] == "search_memory")["input_schema"]
    assert "mode" in schema["properties"]


@pytest.mark.slow
def test_the_local_model_finds_a_paraphrase_that_shares_no_word(alice: Caller) -> None:
    with override_settings(EMBEDDER="local"):
        _remember(alice, [("pet", "adopted a puppy last spring"), ("car", "drives an old blue van")])
        embedded(alice.agent)
        answer = _search(alice, "users", q="dog", mode="semantic")
    assert [r["key"] for r in answer["results"]] == ["pet"]


# --- recall: the N best facts in a context ------------------------------------------------------------


def test_recall_places_the_n_best_facts_for_the_input_then_the_newest(alice: Caller) -> None:
    ThreadFactory(agent=alice.agent, turns=[("user", "hello")])
    ids = _remember(alice, FACTS)
    embedded(alice.agent)

    built = build_context(
        alice, strategy="recent", max_tokens=4000, current_input="Any tennis on tuesdays?", facts_recall=3
    )

    placed = [f["id"] for f in built["facts"]]
    # The one the input matches, then the newest of the others (remembered in the list's order).
    assert placed == [ids["sport"], ids["car"], ids["pet"]]
    passed = [b["source_id"] for b in built["dropped"]["blocks"] if b["reason"] == "not-selected"]
    assert sorted(passed) == sorted(set(ids.values()) - set(placed))
    assert "plays tennis on tuesdays" in built["memory_context"]


def test_recall_without_an_input_takes_the_newest_and_zero_takes_none(alice: Caller) -> None:
    ThreadFactory(agent=alice.agent, turns=[("user", "hello")])
    ids = _remember(alice, FACTS)

    newest = build_context(alice, strategy="recent", max_tokens=4000, facts_recall=2)
    none = build_context(alice, strategy="recent", max_tokens=4000, facts_recall=0)
    every = build_context(alice, strategy="recent", max_tokens=4000)

    assert [f["id"] for f in newest["facts"]] == [ids["sport"], ids["car"]]
    assert none["facts"] == [] and len(every["facts"]) == len(FACTS)


def test_recall_by_meaning_finds_a_fact_in_other_words(alice: Caller) -> None:
    ThreadFactory(agent=alice.agent, turns=[("user", "hello")])
    ids = _remember(alice, FACTS)
    embedded(alice.agent)

    built = build_context(alice, strategy="recent", max_tokens=4000, current_input="cooking", facts_recall=1)

    assert [f["id"] for f in built["facts"]] == [ids["hobby"]]


@pytest.mark.parametrize("value", [-1, 201, "three", True])
def test_a_bad_recall_count_is_a_400_naming_facts_recall(alice: Caller, value: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=[("user", "hello")])
    answer = alice.client.post(
        "/api/v1/threads/t-1/context", {"max_tokens": 1000, "facts_recall": value}, format="json"
    )
    assert answer.status_code == 400 and answer.json()["error"]["field"] == "facts_recall"
