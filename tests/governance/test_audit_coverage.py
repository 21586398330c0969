"""The audit covers what 002 lists (memory-file writes, checkouts and rewinds, runs, key creation
and failed key uses, staff changes through the admin), and holds ids and counts only: a tour of the
API and the admin plants marked text everywhere a person or a model types (contents, paths,
reasons, metadata, namespaces, bad keys), then every audit record is walked and any marked,
path-like or free-text value fails the test."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from governance.audit.chain import audit_verify
from governance.models import AuditRecord
from memoryapp.agents.limits import limits_breaker_reset, limits_redis
from memoryapp.models import AgentKey, Entry, MemoryFileVersion, Thread
from tests.kit.admin import staff_client
from tests.kit.api import Caller, answered, post_entries, post_ok, post_thread, use_fact_tool, use_memory_tool

MARK = "zqx"  # in every text typed into the tour; no audit value may hold it
# A string in an audit record: an id, a name, an outcome, a time (no spaces, no slash)...
ID_LIKE = re.compile(r"[\w.:@+~-]*")
# ... or a count said in words ("3 entries", "2 memory file path(s)").
COUNT_PHRASE = re.compile(r"\d+ [a-z_ ()-]+")


def strings_of(value: Any, where: str) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, dict):
        found = []
        for key, inner in value.items():
            found += strings_of(str(key), f"{where}.<key>") + strings_of(inner, f"{where}.{key}")
        return found
    if isinstance(value, (list, tuple)):
        return [pair for index, inner in enumerate(value) for pair in strings_of(inner, f"{where}[{index}]")]
    return []


def audit_problems() -> list[str]:
    problems = []
    for record in AuditRecord.objects.order_by("seq"):
        fields = {"actor": record.actor, "subject": record.subject, "outcome": record.outcome}
        fields.update({"thread_id": record.thread_id, "details": record.details})
        for where, text in strings_of(fields, f"#{record.seq} {record.action}"):
            if MARK in text.lower():
                problems.append(f"{where}: typed text {text!r}")
            elif "/" in text:
                problems.append(f"{where}: path-like {text!r}")
            elif not (ID_LIKE.fullmatch(text) or COUNT_PHRASE.fullmatch(text)):
                problems.append(f"{where}: free text {text!r}")
    return problems


def api_tour(alice: Caller) -> dict[str, Any]:
    post_thread(alice, "t-tour", user_id="u-ana", metadata={"note": "zqx what the person said"})
    entries = post_entries(
        alice,
        "t-tour",
        [
            {"role": "user", "content": "zqx my secret plans"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "zqx_tool", "arguments": {}}]},
            {"type": "tool_result", "tool_call_id": "c1", "tool_name": "zqx_tool", "content": "zqx result"},
            {"role": "assistant", "content": "zqx noted"},
        ],
    )
    first, last = entries[0]["id"], entries[-1]["id"]
    answered(alice.client.post("/api/v1/threads/t-tour/rewind", {"entry_id": first}, format="json"), 200)
    answered(alice.client.post("/api/v1/threads/t-tour/checkout", {"entry_id": last}, format="json"), 200)
    answered(
        alice.client.post(
            f"/api/v1/entries/{entries[2]['id']}/redact", {"reason": "zqx a typed reason"}, format="json"
        ),
        200,
    )
    # The memory tool: create, edit, rename, delete, in a person's scope.
    path, renamed = "/memories/zqx-people/zqx-ana.md", "/memories/zqx-people/zqx-old.md"
    for command in (
        {"command": "create", "path": path, "file_text": "zqx likes tea"},
        {"command": "str_replace", "path": path, "old_str": "tea", "new_str": "zqx coffee"},
        {"command": "rename", "old_path": path, "new_path": renamed},
        {"command": "delete", "path": renamed},
    ):
        status, answer = use_memory_tool(alice, command)
        assert status in (200, 201), answer
    # Items and facts.
    post_ok(
        alice.client,
        "/api/v1/items",
        {"kind": "fact", "subject": "zqx Ana", "attribute": "zqx diet", "value": "zqx vegetarian"},
    )
    # The person is the configuration's (the request's user_id): the model names a namespace of theirs.
    zqx = {"user_id": "zqx-ana"}
    use_fact_tool(alice, "remember", {"namespace": "users/zqx-ana", "key": "zqx-key", "value": "zqx value"}, **zqx)
    use_fact_tool(alice, "forget", {"namespace": "users/zqx-ana", "key": "zqx-key"}, **zqx)
    # Runs and the thread's busy policy.
    answered(alice.client.patch("/api/v1/threads/t-tour", {"on_busy": "reject"}, format="json"), 200)
    run = post_ok(alice.client, "/api/v1/threads/t-tour/runs")
    answered(alice.client.post(f"/api/v1/threads/t-tour/runs/{run['id']}/finish"), 200)
    # Search and a context build (the access log, which writes no audit).
    post_ok(alice.client, "/api/v1/search", {"text": "zqx plans"}, status=200)
    post_ok(
        alice.client, "/api/v1/threads/t-tour/context", {"max_tokens": 2000, "current_input": "zqx plans"}, status=200
    )
    return {"entries": entries}


def bad_keys(alice: Caller, count: int) -> None:
    stranger = APIClient()
    for n in range(count):
        stranger.credentials(HTTP_AUTHORIZATION=f"Bearer zqx-not-a-key-{n}")
        assert stranger.get("/api/v1/threads").status_code == 401
    # A real key's prefix with a wrong secret: counted against that key.
    prefix = AgentKey.objects.get(agent=alice.agent).prefix
    stranger.credentials(HTTP_AUTHORIZATION=f"Bearer {prefix}_zqx-wrong-secret")
    assert stranger.get("/api/v1/threads").status_code == 401


def admin_tour(alice: Caller, tour: dict[str, Any]) -> None:
    staff: Client = staff_client(username="eve", is_superuser=True)
    thread = Thread.objects.get(agent=alice.agent, external_id="t-tour")
    # The thread's person, changed by staff (two ids: kept).
    person = staff.post(reverse("admin:memoryapp_thread_person", args=[thread.pk]), {"user_id": "u-other"})
    assert person.status_code == 302
    # An entry redacted by staff, with a typed reason (kept on the entry, not in the audit).
    entry = Entry.objects.get(pk=tour["entries"][0]["id"])
    redacted = staff.post(
        reverse("admin:memoryapp_entry_redact", args=[entry.pk]), {"post": "yes", "reason": "zqx staff typed this"}
    )
    assert redacted.status_code in (200, 302)
    assert Entry.objects.get(pk=entry.pk).redacted_at is not None
    # Memory files redacted by staff (paths: kept on the versions).
    version = MemoryFileVersion.objects.filter(agent=alice.agent).first()
    assert version is not None
    staff.post(
        reverse("admin:memoryapp_memoryfileversion_changelist"), {"action": "redact", "_selected_action": [version.pk]}
    )
    # The agent's busy policy and limits changed on its admin page.
    key = AgentKey.objects.get(agent=alice.agent)
    form = {
        "slug": alice.agent.slug,
        "name": "zqx agent name",
        "active": "on",
        "shadow_mode": "on",
        "playbook_shadow_mode": "on",
        "on_busy": "interrupt",
        "busy_timeout_seconds": "30",
        "rate_limit_per_minute": "1200",
        "rate_limit_burst": "",
        "heavy_concurrency": "2",
        "keys-TOTAL_FORMS": "1",
        "keys-INITIAL_FORMS": "1",
        "keys-MIN_NUM_FORMS": "0",
        "keys-MAX_NUM_FORMS": "1000",
        "keys-0-id": str(key.pk),
        "keys-0-agent": str(alice.agent.pk),
    }
    changed = staff.post(reverse("admin:memoryapp_agent_change", args=[alice.agent.pk]), form)
    assert changed.status_code == 302, changed.content.decode()[:3000]


@pytest.fixture(autouse=True)
def failure_counts_fresh() -> None:
    """The failed-key counts are per minute in Redis: another test's failures in the same minute
    must not count in this one's."""
    limits_breaker_reset()
    client = limits_redis()
    for name in client.scan_iter("limits:badkey:*"):
        client.delete(name)


def test_the_audit_covers_002s_list_and_holds_no_typed_text_nor_paths(alice: Caller) -> None:
    tour = api_tour(alice)
    bad_keys(alice, 12)
    admin_tour(alice, tour)

    actions = {record.action: record for record in AuditRecord.objects.order_by("seq")}
    for wanted in (
        "agent_key.created",
        "agent_key.use_failed",
        "thread.rewind",
        "thread.checkout",
        "thread.tool_calls",
        "memory_file.written",
        "entry.redact",
        "item.written",
        "item.forgotten",
        "thread.run",
        "thread.busy_policy_set",
        "thread.user_change",
        "memory_files.redact",
        "agent.limits_set",
    ):
        assert wanted in actions, f"no {wanted} record"
    assert audit_problems() == []
    assert audit_verify().ok


def test_memory_file_writes_are_audited_with_version_ids_and_kinds(alice: Caller) -> None:
    api_tour(alice)
    written = AuditRecord.objects.filter(action="memory_file.written").order_by("seq")
    assert [r.outcome for r in written] == ["created", "changed", "renamed", "deleted"]
    versions = set(MemoryFileVersion.objects.filter(agent=alice.agent).values_list("pk", flat=True))
    audited = [i for r in written for i in r.details["version_ids"]]
    assert len(audited) == len(versions) == 5 and set(audited) == versions  # a rename writes two
    assert all(r.actor == f"agent:{alice.agent.slug}" and r.agent_id == alice.agent.pk for r in written)


def test_bad_keys_are_audited_rate_limited_with_their_counts(alice: Caller) -> None:
    bad_keys(alice, 25)
    unknown = AuditRecord.objects.filter(action="agent_key.use_failed", outcome="unknown_key").order_by("seq")
    # 25 failures in a minute: the 1st and the 10th reach the audit (1, 10, 100, ...), each with its count.
    counts = [r.details["failures_this_minute"] for r in unknown]
    assert counts in ([1, 10], [1, 1, 10], [1, 10, 1])  # a minute may turn during the loop
    assert all(r.agent_id is None and r.subject == "" for r in unknown)
    wrong = AuditRecord.objects.get(action="agent_key.use_failed", outcome="wrong_secret")
    key = AgentKey.objects.get(agent=alice.agent)
    assert (wrong.agent_id, wrong.subject) == (alice.agent.pk, key.prefix)


def test_the_walk_fails_on_a_path_or_typed_text(alice: Caller) -> None:
    """The check above can fail: a record carrying a path, a typed reason or marked text is named."""
    from governance.audit.chain import audit_append

    audit_append(action="probe", actor="agent:x", subject="/memories/a.md", outcome="ok")
    audit_append(action="probe", actor="agent:x", outcome="ok", details={"reason": "because she asked"})
    audit_append(action="probe", actor="agent:x", outcome="ok", details={"value": "zqx-secret"})
    problems = audit_problems()
    assert len(problems) == 3 and "path-like" in problems[0] and "free text" in problems[1] and "typed" in problems[2]
