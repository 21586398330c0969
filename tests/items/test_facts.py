"""Facts (002 remember / recall / search / forget_all) kept as `core:<key>` system items, and the model's memory tools."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from governance.models import AuditRecord, JobRun
from memoryapp.items.facts import fact_remember, fact_search, facts_prune
from memoryapp.items.selectors import context_facts
from memoryapp.models import Event, MemoryItem
from memoryapp.tasks.items import items_prune_tick
from tests.kit.api import use_fact_tool
from tests.kit.events import events_number_now


def put(caller, path: str, value, **extra):
    return caller.client.put(f"/api/v1/facts/{path}", {"value": value, **extra}, format="json")


def test_a_fact_is_a_system_item_in_the_core_slot_of_its_namespace(alice):
    response = put(alice, "users/u-1/diet", "vegetarian")
    assert response.status_code == 200, response.json()
    fact = response.json()
    assert (fact["namespace"], fact["key"], fact["value"]) == ("users/u-1", "diet", "vegetarian")
    assert "expires_at_ms" not in fact
    item = MemoryItem.objects.get()
    assert (item.kind, item.attribute, item.subject, item.namespace, item.trust, item.status) == (
        "fact",
        "core:diet",
        "users/u-1",
        "users/u-1",
        "system",
        "active",
    )
    assert item.user_id == "u-1"  # users/<id> belongs to that person


def test_recall_returns_the_value_with_its_times_and_404_when_missing(alice):
    put(alice, "users/u-1/prefs", {"units": "metric", "langs": ["pt", "en"]})
    body = alice.client.get("/api/v1/facts/users/u-1/prefs").json()
    assert body["value"] == {"units": "metric", "langs": ["pt", "en"]}
    assert body["created_at_ms"] <= body["updated_at_ms"]
    missing = alice.client.get("/api/v1/facts/users/u-1/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_a_new_value_supersedes_and_the_same_value_changes_nothing(alice):
    put(alice, "users/u-1/diet", "vegan")
    first = alice.client.get("/api/v1/facts/users/u-1/diet").json()
    put(alice, "users/u-1/diet", "vegan")
    assert MemoryItem.objects.count() == 1
    put(alice, "users/u-1/diet", "vegetarian")
    now = alice.client.get("/api/v1/facts/users/u-1/diet").json()
    assert now["value"] == "vegetarian"
    assert now["created_at_ms"] == first["created_at_ms"]
    assert list(MemoryItem.objects.order_by("valid_from").values_list("value", "status")) == [
        ("vegan", "superseded"),
        ("vegetarian", "active"),
    ]
    assert [f.text for f in context_facts(agent=alice.agent, user_id="u-1")] == ["diet: vegetarian (previously: vegan)"]


@pytest.mark.parametrize("path", ["users//diet", "/users/diet", "users/ /diet"])
def test_a_bad_namespace_is_a_400_naming_namespace(alice, path):
    response = put(alice, path, "x")
    assert response.status_code == 400, response.json()
    assert response.json()["error"] == {
        "code": "invalid_value",
        "message": response.json()["error"]["message"],
        "field": "namespace",
    }
    assert not MemoryItem.objects.exists()


def test_the_root_namespace_is_refused_by_the_memory_tools(alice):
    response = alice.client.post(
        "/api/v1/memory-tools",
        {"name": "remember", "input": {"key": "k", "value": "v"}, "namespace": ""},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "user_id"


def test_a_value_over_one_mebibyte_of_json_is_refused_with_its_own_code(alice):
    response = put(alice, "users/u-1/blob", "x" * (1024 * 1024))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "value_too_large"
    assert not MemoryItem.objects.exists()


def test_a_fact_with_a_ttl_is_invisible_once_it_expires_and_the_prune_removes_it(alice):
    response = put(alice, "users/u-1/otp", "123456", ttl_secs=60)
    assert "expires_at_ms" in response.json()
    put(alice, "users/u-1/diet", "vegan")
    later = timezone.now() + timedelta(seconds=61)
    with freeze_time(later):
        assert alice.client.get("/api/v1/facts/users/u-1/otp").status_code == 404
        assert [f.text for f in context_facts(agent=alice.agent, user_id="u-1")] == ["diet: vegan"]
        assert [h.fact["key"] for h in fact_search(agent=alice.agent, namespace="users")] == ["diet"]
        assert facts_prune() == 1
        assert facts_prune() == 0
    assert list(MemoryItem.objects.values_list("attribute", flat=True)) == ["core:diet"]


def test_the_prune_job_runs_from_its_beat_tick_and_records_a_job_run(alice, django_capture_on_commit_callbacks):
    fact_remember(agent=alice.agent, namespace="users/u-1", key="otp", value="1", ttl_secs=1)
    with freeze_time(timezone.now() + timedelta(seconds=5)), django_capture_on_commit_callbacks(execute=True):
        items_prune_tick()
    run = JobRun.objects.get(kind="items_prune")
    assert (run.status, run.result) == ("succeeded", {"memory_items_deleted": 1})
    assert not MemoryItem.objects.exists()


def test_the_prune_schedule_exists_in_the_beat_database(db):
    from django_celery_beat.models import PeriodicTask

    task = PeriodicTask.objects.get(task="memoryapp.tasks.items_prune_tick")
    assert task.enabled and task.interval is not None


def test_search_covers_nested_namespaces_ranks_by_share_of_words_then_newest(alice):
    with freeze_time(timezone.now() - timedelta(minutes=3)):
        fact_remember(agent=alice.agent, namespace="users/42", key="diet", value="vegetarian and no peanuts")
    with freeze_time(timezone.now() - timedelta(minutes=2)):
        fact_remember(agent=alice.agent, namespace="users/42/trips", key="lisbon", value="loved the vegetarian food")
    with freeze_time(timezone.now() - timedelta(minutes=1)):
        fact_remember(agent=alice.agent, namespace="users/43", key="diet", value="vegetarian")
    fact_remember(agent=alice.agent, namespace="usersx", key="diet", value="vegetarian peanuts")
    response = alice.client.get("/api/v1/facts/users/42?q=the vegetarian peanuts")
    assert response.status_code == 200, response.json()
    hits = response.json()["results"]
    assert [(h["namespace"], h["key"], h["score"]) for h in hits] == [
        ("users/42", "diet", 1.0),
        ("users/42/trips", "lisbon", 0.5),
    ]
    everything = alice.client.get("/api/v1/facts/users").json()["results"]
    assert [(h["namespace"], "score" in h) for h in everything] == [
        ("users/43", False),
        ("users/42/trips", False),
        ("users/42", False),
    ]
    assert len(alice.client.get("/api/v1/facts/users?q=vegetarian&limit=1").json()["results"]) == 1


def test_search_matches_the_key_too(alice):
    fact_remember(agent=alice.agent, namespace="team", key="office", value="Lisbon")
    assert [h.fact["key"] for h in fact_search(agent=alice.agent, namespace="team", text="office")] == ["office"]


def test_forget_one_key_keeps_history_and_forget_all_removes_a_namespace_and_those_inside(alice):
    put(alice, "users/42/diet", "vegan")
    put(alice, "users/42/diet", "vegetarian")
    put(alice, "users/42/trips/lisbon", "2025")
    put(alice, "users/420/diet", "keto")
    gone = alice.client.delete("/api/v1/facts/users/42/diet")
    assert gone.status_code == 200
    assert alice.client.get("/api/v1/facts/users/42/diet").status_code == 404
    assert MemoryItem.objects.filter(namespace="users/42").count() == 2  # history kept
    response = alice.client.delete("/api/v1/facts/users/42?all=true")
    assert response.json() == {"namespace": "users/42", "deleted": 1}
    assert list(MemoryItem.objects.values_list("namespace", flat=True)) == ["users/420"]
    assert AuditRecord.objects.filter(action="facts.forgotten", outcome="deleted").count() == 1


def test_facts_of_another_agent_are_not_found(alice, mallory):
    put(alice, "users/42/diet", "vegan")
    assert mallory.client.get("/api/v1/facts/users/42/diet").status_code == 404
    assert mallory.client.get("/api/v1/facts/users?q=vegan").json()["results"] == []
    assert mallory.client.delete("/api/v1/facts/users/42/diet").status_code == 404
    assert mallory.client.delete("/api/v1/facts/users?all=true").json()["deleted"] == 0
    assert MemoryItem.objects.filter(agent=alice.agent).count() == 1


def test_the_memory_tools_remember_search_and_forget_in_the_persons_namespace(alice, mallory):
    remembered = use_fact_tool(alice, "remember", {"key": "diet", "value": "vegetarian"}, user_id="u-ana")
    assert remembered == {"result": "Remembered diet: vegetarian", "is_error": False}
    assert MemoryItem.objects.get().namespace == "users/u-ana"
    found = use_fact_tool(alice, "search_memory", {"query": "what about vegetarian food"}, user_id="u-ana")
    assert found["result"] == "Found 1 memory:\n- diet: vegetarian"
    assert (
        use_fact_tool(mallory, "search_memory", {"query": "vegetarian"}, user_id="u-ana")["result"]
        == "No memories matched."
    )
    assert (
        use_fact_tool(alice, "search_memory", {"query": "vegetarian"}, user_id="u-ben")["result"]
        == "No memories matched."
    )
    assert use_fact_tool(alice, "forget", {"key": "diet"}, user_id="u-ana")["result"] == "Forgot diet."
    assert (
        use_fact_tool(alice, "forget", {"key": "diet"}, user_id="u-ana")["result"] == "Nothing was remembered as diet."
    )
    wrong = use_fact_tool(alice, "remember", {"key": "a/b", "value": "x"}, user_id="u-ana")
    assert wrong["is_error"] is True and wrong["result"].startswith("Error: key must")


def test_an_unknown_memory_tool_is_a_400(alice):
    response = alice.client.post("/api/v1/memory-tools", {"name": "rm_rf", "input": {}, "user_id": "u"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "name"


def test_only_all_true_forgets_a_namespace_and_any_other_value_is_a_400_naming_all(alice):
    put(alice, "users/42/diet", "vegan")
    put(alice, "users/43/diet", "keto")
    for path in ("users?all=false", "users?all=maybe", "users?all=1", "users?all=", "users", "users/42?all=no"):
        response = alice.client.delete(f"/api/v1/facts/{path}")
        assert response.status_code == 400, path
        assert response.json()["error"]["field"] == "all", path
    assert MemoryItem.objects.filter(agent=alice.agent, status="active").count() == 2
    assert not AuditRecord.objects.filter(action="facts.forgotten").exists()
    response = alice.client.delete("/api/v1/facts/users?all=true")
    assert response.status_code == 200 and response.json() == {"namespace": "users", "deleted": 2}


def test_facts_that_go_without_an_item_forget_are_change_events_too(alice, bob):
    """Forgetting a whole namespace, and the prune of expired facts, deleted items with no event: a
    follower of the agent's events (SSE, webhooks) kept facts the agent had forgotten."""
    fact_remember(agent=alice.agent, namespace="users/u-2", key="diet", value="vegan")
    fact_remember(agent=alice.agent, namespace="users/u-1", key="pin", value="1234")
    fact_remember(agent=alice.agent, namespace="users/u-1/cards", key="visa", value="4111")
    fact_remember(agent=bob.agent, namespace="users/b", key="otp", value="9", ttl_secs=1)
    doomed = sorted(
        MemoryItem.objects.filter(agent=alice.agent, namespace__startswith="users/u-1").values_list("pk", flat=True)
    )
    expiring = list(MemoryItem.objects.filter(agent=bob.agent).values_list("pk", flat=True))
    assert len(doomed) == 2 and len(expiring) == 1
    events_number_now()
    assert alice.client.delete("/api/v1/facts/users/u-1?all=true").status_code == 200
    with freeze_time(timezone.now() + timedelta(seconds=5)):
        assert facts_prune() == 1
    events_number_now()
    assert [e.ids for e in Event.objects.filter(agent=alice.agent, type="item.forgotten")] == [doomed]
    assert [e.ids for e in Event.objects.filter(agent=bob.agent, type="item.forgotten")] == [expiring]
    assert MemoryItem.objects.filter(agent=alice.agent).count() == 1
