"""The retention prune: each policy rule, the narrowest policy, busy and held threads, the dry run."""

from __future__ import annotations

from typing import Any

import pytest

from governance.models import AuditRecord, JobRun
from governance.retention.policies import policy_for
from governance.retention.services import retention_prune
from memoryapp.items.facts import fact_remember
from memoryapp.models import Agent, Entry, Event, Evidence, LegalHold, MemoryItem, Thread
from memoryapp.threads.runs import run_finish, run_start
from memoryapp.threads.services import thread_rewind
from tests.kit.audit_names import audit_name
from tests.kit.factories import AgentFactory, EntryFactory, MemoryItemFactory, ThreadFactory, rome_thread, tool_round
from tests.retention.world import (
    NOW,
    age_item,
    aged_thread,
    compaction,
    days_ago,
    finished_run,
    path_texts,
    policy,
)

pytestmark = pytest.mark.django_db


def _prune(**options: Any) -> dict[str, Any]:
    return retention_prune(as_of=NOW, **options).report()


def _threads(agent: Agent) -> list[str]:
    return sorted(Thread.objects.filter(agent=agent).values_list("external_id", flat=True))


# --- thread TTL -------------------------------------------------------------------------------------


def test_thread_ttl_deletes_threads_last_written_before_it_and_keeps_the_others() -> None:
    alice: Agent = AgentFactory(slug="alice")
    policy(thread_ttl_days=30)
    old = aged_thread(alice, "t-old", days=40)
    aged_thread(alice, "t-new", days=5)
    # Created long ago, but written to yesterday: its last write counts, not its creation.
    revived = aged_thread(alice, "t-revived", days=90)
    EntryFactory(thread=revived, role="user", created_at=days_ago(1))

    report = _prune()

    assert _threads(alice) == ["t-new", "t-revived"]
    assert report["counts"]["threads_deleted"] == 1
    assert report["counts"]["thread_entries_deleted"] == 3
    # A pruned thread is named by its owner's pseudonym, never by the id the client chose.
    named = audit_name(agent_id=alice.pk, user_id=old.user_id, value="t-old")
    assert named != "t-old" and report["thread_ids"] == [named]
    assert not Entry.objects.filter(thread_id=old.pk).exists()
    # The cascade's own record, and the prune's one record of counts.
    assert AuditRecord.objects.filter(action="thread.delete", thread_id=named).count() == 1
    prune_record = AuditRecord.objects.get(action="retention.prune")
    assert prune_record.details["threads_deleted"] == 1
    assert prune_record.details["thread_ids"] == [named]


def test_the_narrowest_policy_applies_whole() -> None:
    alice: Agent = AgentFactory(slug="alice")
    bob: Agent = AgentFactory(slug="bob")
    carol: Agent = AgentFactory(slug="carol")
    default = policy(thread_ttl_days=30)
    bobs = policy(bob, thread_ttl_days=None, drop_branches=True)  # bob keeps threads forever
    carols = policy(carol, thread_ttl_days=10)
    for agent in (alice, bob, carol):
        aged_thread(agent, "t-40", days=40)
        aged_thread(agent, "t-20", days=20)

    assert policy_for(alice) == default
    assert policy_for(bob) == bobs
    assert policy_for(carol) == carols
    _prune()

    assert _threads(alice) == ["t-20"]
    assert _threads(bob) == ["t-20", "t-40"]
    assert _threads(carol) == []


def test_without_any_policy_nothing_but_expired_facts_goes() -> None:
    alice: Agent = AgentFactory(slug="alice")
    aged_thread(alice, "t-old", days=4000)
    fact_remember(agent=alice, namespace="users/ana", key="city", value="Lyon", ttl_secs=60)
    fact = MemoryItem.objects.get(agent=alice, namespace="users/ana")
    MemoryItem.objects.filter(pk=fact.pk).update(expires_at=days_ago(1))

    report = _prune()

    assert _threads(alice) == ["t-old"]
    assert not MemoryItem.objects.filter(pk=fact.pk).exists()
    assert report["counts"]["facts_expired"] == 1


def test_a_busy_thread_is_skipped_and_counted() -> None:
    alice: Agent = AgentFactory(slug="alice")
    policy(thread_ttl_days=30)
    busy = aged_thread(alice, "t-busy", days=40)
    aged_thread(alice, "t-idle", days=40)
    JobRun.objects.create(
        kind="compaction", status=JobRun.Status.RUNNING, arguments={"thread_pk": busy.pk, "thread_id": "t-busy"}
    )
    # A run that ended is no reason to wait.
    JobRun.objects.create(
        kind="extraction", status=JobRun.Status.SUCCEEDED, arguments={"thread_pk": busy.pk + 1000, "thread_id": "x"}
    )

    report = _prune()

    assert _threads(alice) == ["t-busy"]
    assert report["counts"]["threads_busy"] == 1
    assert report["counts"]["threads_deleted"] == 1


def test_a_thread_an_agents_run_holds_is_busy_and_kept_until_the_run_ends() -> None:
    alice: Agent = AgentFactory(slug="alice")
    policy(thread_ttl_days=30)
    held = aged_thread(alice, "t-running", days=40)
    ended = aged_thread(alice, "t-finished", days=40)
    run = run_start(thread=held, agent=alice)
    run_finish(agent=alice, thread=ended, run_id=run_start(thread=ended, agent=alice).id)

    report = _prune()

    assert _threads(alice) == ["t-running"]
    assert report["counts"]["threads_busy"] == 1 and report["counts"]["threads_deleted"] == 1
    run_finish(agent=alice, thread=held, run_id=run.id)
    assert _prune()["counts"]["threads_deleted"] == 1
    assert _threads(alice) == []


# --- legal holds ------------------------------------------------------------------------------------


def test_holds_keep_what_they_cover_from_every_rule() -> None:
    alice: Agent = AgentFactory(slug="alice")
    bob: Agent = AgentFactory(slug="bob")
    policy(thread_ttl_days=30, inactive_item_days=30, drop_branches=True)
    aged_thread(alice, "t-ana", days=40, user_id="u-ana")
    aged_thread(alice, "t-ben", days=40, user_id="u-ben")
    aged_thread(alice, "t-held", days=40, user_id="u-cy")
    aged_thread(bob, "t-ana", days=40, user_id="u-ana")
    held_branchy, _ = rome_thread(alice)  # u-ana's; a branch to drop, but held
    LegalHold.objects.create(agent=alice, user_id="u-ana", reason="case 1", placed_by="pat")
    LegalHold.objects.create(agent=alice, thread_external_id="t-held", reason="case 2", placed_by="pat")
    kept_item = age_item(MemoryItemFactory(agent=alice, user_id="u-ana", value="vegan"), 90, status="stale")
    gone_item = age_item(MemoryItemFactory(agent=alice, user_id="u-ben", value="vegan"), 90, status="stale")

    report = _prune()

    # u-ana is held in alice only: bob's thread of hers goes.
    assert _threads(alice) == ["rome", "t-ana", "t-held"]
    assert _threads(bob) == []
    assert Entry.objects.filter(thread=held_branchy).count() == 4
    assert MemoryItem.objects.filter(pk=kept_item.pk).exists()
    assert not MemoryItem.objects.filter(pk=gone_item.pk).exists()
    assert report["counts"]["threads_held"] == 3  # t-ana, t-held, and rome's branch
    assert report["counts"]["threads_deleted"] == 2


def test_a_lifted_or_ended_hold_keeps_nothing() -> None:
    alice: Agent = AgentFactory(slug="alice")
    policy(thread_ttl_days=30)
    aged_thread(alice, "t-ana", days=40)
    LegalHold.objects.create(user_id="u-ana", reason="over", placed_by="pat", lifted_at=NOW, lifted_by="pat")
    LegalHold.objects.create(user_id="u-ana", reason="ended", placed_by="pat", ends_at=days_ago(1))

    assert _prune()["counts"]["threads_held"] == 0
    assert _threads(alice) == []


# --- branches and checkpoints -----------------------------------------------------------------------


def test_drop_branches_deletes_what_rewinds_left_behind_and_keeps_the_active_branch_whole() -> None:
    alice: Agent = AgentFactory(slug="alice")
    policy(drop_branches=True)
    thread, turns = rome_thread(alice)
    before = path_texts(thread)
    # An item that stood only on the abandoned branch goes with it.
    item = MemoryItemFactory(
        agent=alice, value="likes the Vatican", evidence=[{"entry_id": turns["vatican"].id, "quote": "Vatican"}]
    )

    report = _prune()

    assert path_texts(thread) == before
    assert set(Entry.objects.filter(thread=thread).values_list("id", flat=True)) == {
        turns["q"].id,
        turns["colosseum"].id,
    }
    assert report["counts"]["branches_deleted"] == 1
    assert report["counts"]["branch_entries_deleted"] == 2
    assert not MemoryItem.objects.filter(pk=item.pk).exists()


def test_keep_checkpoints_keeps_the_newest_summaries_and_drops_the_history_wholly_before_them() -> None:
    alice: Agent = AgentFactory(slug="alice")
    policy(keep_checkpoints=2)
    thread = ThreadFactory(agent=alice, external_id="t-long")
    turns = [EntryFactory(thread=thread, role="user", content=f"turn {n}") for n in range(3)]
    first = compaction(thread, first_kept=turns[2])
    turns += [EntryFactory(thread=thread, role="user", content=f"turn {n}") for n in range(3, 6)]
    second = compaction(thread, first_kept=turns[4])
    turns += [EntryFactory(thread=thread, role="user", content=f"turn {n}") for n in range(6, 9)]
    third = compaction(thread, first_kept=turns[7])
    leaf = EntryFactory(thread=thread, role="user", content="turn 9")
    # A rewound branch goes too (002: keepCheckpoints drops them).
    stray = EntryFactory(thread=thread, role="user", content="stray", parent_id=turns[5].id, activate=False)
    quoted = MemoryItemFactory(agent=alice, value="said early", evidence=[{"entry_id": turns[0].id, "quote": "turn 0"}])

    report = _prune()

    thread.refresh_from_db()
    kept = set(Entry.objects.filter(thread=thread).values_list("id", flat=True))
    assert first.id not in kept and stray.id not in kept
    assert {second.id, third.id, leaf.id} <= kept
    # Wholly before the oldest kept summary's first kept entry: turns 0-3 go; turn 4 is the new root.
    assert kept == {t.id for t in turns[4:]} | {second.id, third.id, leaf.id}
    assert Entry.objects.get(pk=turns[4].id).parent_id is None
    assert path_texts(thread)[0] == "message:turn 4"
    assert path_texts(thread)[-1] == "message:turn 9"
    assert thread.active_leaf_id == leaf.id
    assert report["counts"]["checkpoints_deleted"] == 1
    assert report["counts"]["history_entries_deleted"] == 4
    assert report["counts"]["branch_entries_deleted"] == 1
    # What memory learned from the dropped history stays (the summary stands in for it).
    assert MemoryItem.objects.filter(pk=quoted.pk).exists()
    assert Evidence.objects.get(item=quoted).entry_id is None


def test_keep_checkpoints_leaves_a_thread_with_few_enough_compactions_alone() -> None:
    alice: Agent = AgentFactory(slug="alice")
    policy(keep_checkpoints=3)
    thread = ThreadFactory(agent=alice, external_id="t-short")
    turns = [EntryFactory(thread=thread, role="user", content=f"turn {n}") for n in range(3)]
    compaction(thread, first_kept=turns[2])
    count = Entry.objects.filter(thread=thread).count()

    report = _prune()

    assert Entry.objects.filter(thread=thread).count() == count
    assert report["counts"]["checkpoints_deleted"] == 0


# --- items ------------------------------------------------------------------------------------------


def test_item_ttls_expire_unreviewed_suggestions_and_remove_old_inactive_items_with_their_evidence() -> None:
    alice: Agent = AgentFactory(slug="alice")
    policy(suggested_review_days=14, inactive_item_days=30)
    thread = aged_thread(alice, "t-1", days=1)
    entry = Entry.objects.filter(thread=thread).first()
    assert entry is not None
    quote = [{"entry_id": entry.id, "quote": entry.text}]
    unreviewed = age_item(MemoryItemFactory(agent=alice, attribute="a1", trust="model", evidence=quote), 20)
    fresh = age_item(MemoryItemFactory(agent=alice, attribute="a2", trust="model", evidence=quote), 3)
    active = age_item(MemoryItemFactory(agent=alice, attribute="a3", evidence=quote), 400)
    superseded = age_item(MemoryItemFactory(agent=alice, attribute="a4", value="old", evidence=quote), 60)
    MemoryItemFactory(agent=alice, attribute="a4", value="new")
    stale = age_item(MemoryItemFactory(agent=alice, attribute="a5", evidence=quote), 60, status="stale")
    rejected = age_item(MemoryItemFactory(agent=alice, attribute="a6"), 60, status="rejected")
    recent_stale = age_item(MemoryItemFactory(agent=alice, attribute="a7"), 10, status="stale")
    assert unreviewed.status == "suggested" and superseded.status in ("active", "superseded")
    superseded.refresh_from_db()
    assert superseded.status == "superseded"

    report = _prune()

    left = set(MemoryItem.objects.filter(agent=alice).values_list("pk", flat=True))
    assert unreviewed.pk not in left
    assert {fresh.pk, active.pk, recent_stale.pk} <= left
    assert not left & {superseded.pk, stale.pk, rejected.pk}
    assert not Evidence.objects.filter(item_id__in=[unreviewed.pk, superseded.pk, stale.pk]).exists()
    assert report["counts"]["suggested_items_expired"] == 1
    assert report["counts"]["inactive_items_deleted"] == 3
    assert report["counts"]["memory_items_deleted"] == 4


# --- runs, tool results, events; audit ----------------------------------------------------------------


def test_job_runs_tool_results_and_events_past_their_ttl_go_and_audit_stays() -> None:
    alice: Agent = AgentFactory(slug="alice")
    policy(job_run_days=7, tool_result_days=30, event_days=30)
    old_run, new_run = finished_run(days=10, agent=alice), finished_run(days=1, agent=alice)
    unowned = finished_run(days=10)
    running = JobRun.objects.create(kind="test", status=JobRun.Status.RUNNING)
    JobRun.objects.filter(pk=running.pk).update(created_at=days_ago(30))
    thread = ThreadFactory(agent=alice, external_id="t-tools")
    _, old_result = tool_round(thread, 1)
    _, new_result = tool_round(thread, 2)
    EntryFactory(
        thread=thread,
        type="compaction",
        event={"cleared": {old_result.id: "[cleared]", new_result.id: "[cleared]"}},
    )
    _, never_cleared = tool_round(thread, 3)
    Entry.objects.filter(pk__in=[old_result.id, never_cleared.id]).update(created_at=days_ago(40))
    Event.objects.filter(agent=alice).update(at=days_ago(40))
    events = Event.objects.filter(agent=alice).count()
    audit_before = AuditRecord.objects.count()

    report = _prune()

    assert set(JobRun.objects.values_list("pk", flat=True)) >= {new_run.pk, running.pk}
    assert not JobRun.objects.filter(pk__in=[old_run.pk, unowned.pk]).exists()
    assert report["counts"]["job_runs_deleted"] == 2
    old_result.refresh_from_db()
    new_result.refresh_from_db()
    never_cleared.refresh_from_db()
    assert old_result.redacted_at is not None and "PAGE-1" not in old_result.text
    assert new_result.redacted_at is None and never_cleared.redacted_at is None
    assert report["counts"]["tool_results_expired"] == 1
    assert report["counts"]["events_deleted"] == events > 0
    # Audit records are never pruned: the prune only adds its own.
    assert AuditRecord.objects.filter(seq__lte=audit_before).count() == audit_before


# --- the dry run ------------------------------------------------------------------------------------


def _world() -> tuple[Agent, Agent]:
    alice: Agent = AgentFactory(slug="alice")
    bob: Agent = AgentFactory(slug="bob")
    policy(thread_ttl_days=30, drop_branches=True, suggested_review_days=14, inactive_item_days=30, job_run_days=7)
    policy(bob, thread_ttl_days=60, keep_checkpoints=1)
    for n in range(7):
        aged_thread(alice, f"a-{n}", days=20 + 10 * n)
        aged_thread(bob, f"b-{n}", days=20 + 10 * n, user_id="u-held" if n == 6 else "u-ana")
    rome_thread(alice)
    branchy = ThreadFactory(agent=alice, external_id="rewound")
    turns = [EntryFactory(thread=branchy, role="user", content=f"turn {n}") for n in range(4)]
    thread_rewind(thread=branchy, entry_id=turns[1].id)
    long = ThreadFactory(agent=bob, external_id="long")
    kept = [EntryFactory(thread=long, role="user", content=f"turn {n}") for n in range(3)]
    compaction(long, first_kept=kept[1])
    more = [EntryFactory(thread=long, role="user", content=f"turn {n}") for n in range(3, 6)]
    compaction(long, first_kept=more[1])
    for n in range(5):
        age_item(MemoryItemFactory(agent=alice, attribute=f"s{n}", trust="model"), 5 * n)
        age_item(MemoryItemFactory(agent=alice, attribute=f"r{n}"), 15 * n, status="rejected")
    for n in range(4):
        finished_run(days=3 * n, agent=alice)
    busy = Thread.objects.get(agent=alice, external_id="a-5")
    JobRun.objects.create(kind="compaction", status=JobRun.Status.RUNNING, arguments={"thread_pk": busy.pk})
    LegalHold.objects.create(agent=bob, user_id="u-held", reason="case", placed_by="pat")
    return alice, bob


def _snapshot() -> dict[str, Any]:
    return {
        "threads": sorted(Thread.objects.values_list("agent_id", "external_id")),
        "entries": sorted(Entry.objects.values_list("id", "parent_id", "content_hash", "redacted_at")),
        "items": sorted(MemoryItem.objects.values_list("id", "status")),
        "runs": sorted(JobRun.objects.values_list("id", "status")),
        "audit": AuditRecord.objects.count(),
    }


def test_the_dry_run_changes_nothing_and_reports_exactly_what_the_real_run_then_does() -> None:
    _world()
    before = _snapshot()

    dry = _prune(dry_run=True)

    assert _snapshot() == before
    assert dry["dry_run"] is True
    owners = {
        (external_id, agent_id, user_id)
        for agent_id, external_id, user_id in Thread.objects.values_list("agent_id", "external_id", "user_id")
    }
    real = _prune()
    assert real["counts"] == dry["counts"]
    # The dry run names the threads by id (staff check them); the real run by their owners' pseudonyms.
    named = {audit_name(agent_id=a, user_id=u, value=t) for t, a, u in owners if t in dry["thread_ids"]}
    assert set(real["thread_ids"]) <= named and len(real["thread_ids"]) == len(dry["thread_ids"])
    # The world had something of every kind the rules take, so the equality says something.
    counts = real["counts"]
    for kind in (
        "threads_deleted",
        "threads_busy",
        "threads_held",
        "checkpoints_deleted",
        "branches_deleted",
        "suggested_items_expired",
        "inactive_items_deleted",
        "job_runs_deleted",
    ):
        assert counts[kind] > 0, kind
    # A second run finds nothing left to do (the same cut-off time).
    again = _prune(dry_run=True)["counts"]
    assert {k: v for k, v in again.items() if k not in ("threads_busy", "threads_held")} == dict.fromkeys(
        (k for k in again if k not in ("threads_busy", "threads_held")), 0
    )


def test_a_dry_run_for_one_agent_counts_that_agent_only() -> None:
    alice, bob = _world()
    whole = _prune(dry_run=True)["counts"]
    only_bob = _prune(dry_run=True, agent=bob)

    assert only_bob["agent"] == "bob"
    assert all(t.startswith("b-") or t == "long" for t in only_bob["thread_ids"])
    assert 0 < only_bob["counts"]["threads_deleted"] < whole["threads_deleted"]
    _prune(agent=bob)
    assert Thread.objects.filter(agent=alice).count() == 9


def test_a_run_claimed_again_after_its_last_commit_does_nothing_twice() -> None:
    alice: Agent = AgentFactory(slug="alice")
    policy(thread_ttl_days=30)
    aged_thread(alice, "t-old", days=40)
    run = JobRun.objects.create(kind="retention_prune", status=JobRun.Status.RUNNING, arguments={})
    first = retention_prune(as_of=NOW, run=run)
    run.refresh_from_db()  # as the run stood when its worker died, just before it was marked done
    assert run.result["done"] is True and "position" in run.result

    again = retention_prune(as_of=NOW, run=run)

    assert again.report()["counts"] == first.report()["counts"]
    assert AuditRecord.objects.filter(action="retention.prune").count() == 1
