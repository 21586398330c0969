"""The REST memory tools (`POST /api/v1/memory-tools`) keep the model inside the scope the request's
configuration names (`user_id`, `thread_id`, `namespace`), as the MCP server does: another person's
namespace or thread answers as a missing one (issue 23)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from memoryapp.compaction.services import compaction_now
from memoryapp.items.facts import fact_recall, fact_remember
from memoryapp.models import Entry, MemoryItem, Thread
from tests.kit.api import Caller, use_fact_tool
from tests.kit.factories import tool_thread

pytestmark = pytest.mark.django_db


def test_the_facts_tool_of_one_person_stores_and_finds_nothing_in_another_persons_namespace(
    alice: Caller,
) -> None:
    """`fact_tool_run` stored a fact in users/u-bob for a connection of u-ana: the model chose."""
    fact_remember(agent=alice.agent, namespace="users/u-bob", key="pin", value="4242")
    ana = {"user_id": "u-ana"}

    wrote = use_fact_tool(alice, "remember", {"key": "pin", "value": "0000", "namespace": "users/u-bob"}, **ana)
    found = use_fact_tool(alice, "search_memory", {"query": "pin", "namespace": "users/u-bob"}, **ana)
    everyone = use_fact_tool(alice, "search_memory", {"query": "pin", "namespace": "users"}, **ana)
    forgot = use_fact_tool(alice, "forget", {"key": "pin", "namespace": "users/u-bob"}, **ana)
    nothing = use_fact_tool(alice, "forget", {"key": "pin"}, **ana)

    assert wrote["is_error"] and "4242" not in wrote["result"]
    assert found == everyone == {"result": "No memories matched.", "is_error": False}
    assert forgot == nothing == {"result": "Nothing was remembered as pin.", "is_error": False}
    assert fact_recall(agent=alice.agent, namespace="users/u-bob", key="pin")["value"] == "4242"  # type: ignore[index]
    assert not MemoryItem.objects.filter(agent=alice.agent, namespace="users/u-bob", value="0000").exists()


def test_the_facts_tool_works_in_the_persons_own_the_configured_and_shared_namespaces(alice: Caller) -> None:
    own = use_fact_tool(
        alice, "remember", {"key": "tea", "value": "green", "namespace": "users/u-ana/prefs"}, user_id="u-ana"
    )
    shared = use_fact_tool(alice, "remember", {"key": "wifi", "value": "guest", "namespace": "team"}, user_id="u-ana")
    # The developer's configuration may name a namespace; the model may go inside it.
    configured = use_fact_tool(
        alice, "remember", {"key": "seat", "value": "aisle", "namespace": "users/u-bob/travel"}, namespace="users/u-bob"
    )
    assert not own["is_error"] and not shared["is_error"] and not configured["is_error"], (own, shared, configured)
    assert fact_recall(agent=alice.agent, namespace="users/u-bob/travel", key="seat") is not None


def test_read_result_over_rest_serves_a_cleared_result_of_the_scope_and_no_other(
    alice: Caller, mallory: Caller
) -> None:
    thread = tool_thread(alice.agent, rounds=2, external_id="t-tools")  # about u-ana
    other = tool_thread(alice.agent, rounds=1, external_id="t-bob")
    Thread.objects.filter(pk=other.pk).update(user_id="u-bob")
    compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1})
    cleared = Entry.objects.filter(thread=thread, type="tool_result").order_by("seq").first()
    assert cleared is not None
    bobs = Entry.objects.get(thread=other, type="tool_result").id

    read = use_fact_tool(alice, "read_result", {"handle": cleared.id}, user_id="u-ana", thread_id="t-tools")
    assert not read["is_error"] and read["result"].startswith("PAGE-0-BODY")
    missing = use_fact_tool(alice, "read_result", {"handle": "ent_missing"}, user_id="u-ana")
    assert missing == {"result": "Error: Tool result was not found.", "is_error": True}
    for caller, handle, scope in (
        (alice, bobs, {"user_id": "u-ana"}),  # another person's thread
        (alice, cleared.id, {"user_id": "u-bob"}),  # another person
        (alice, cleared.id, {"user_id": "u-ana", "thread_id": "t-other"}),  # another thread
        (mallory, cleared.id, {"user_id": "u-ana", "thread_id": "t-tools"}),  # another agent
    ):
        assert use_fact_tool(caller, "read_result", {"handle": handle}, **scope) == missing, scope


def test_read_result_does_not_serve_a_tool_result_screening_holds(alice: Caller) -> None:
    """A held turn waits for its reviewer out of every context; a cleared placeholder's handle must
    not bring it back to the model."""
    thread = tool_thread(alice.agent, rounds=2, external_id="t-held")
    compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1})
    cleared = Entry.objects.filter(thread=thread, type="tool_result").order_by("seq").first()
    assert cleared is not None
    scope = {"user_id": "u-ana", "thread_id": "t-held"}
    assert not use_fact_tool(alice, "read_result", {"handle": cleared.id}, **scope)["is_error"]
    assert alice.client.get(f"/api/v1/tool-results/{cleared.id}").status_code == 200

    Entry.objects.filter(pk=cleared.pk).update(held_at=timezone.now())

    held = use_fact_tool(alice, "read_result", {"handle": cleared.id}, **scope)
    assert held == {"result": "Error: Tool result was not found.", "is_error": True}
    # Nor by the tool's REST counterpart, which a developer's read_result may call instead.
    assert alice.client.get(f"/api/v1/tool-results/{cleared.id}").status_code == 404
