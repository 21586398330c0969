"""The access log: every context build and search records the ids of the items and entries it
sent, with the agent, thread, person and time, in one statement that also counts the items as
retrieved; an item's admin page shows when and in which threads it was used; the log is pruned
by age and goes with a person's erasure."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from memoryapp.forgetting.person import person_erase
from memoryapp.models import AccessLog, Entry, MemoryItem, Thread
from memoryapp.search.access_log import access_log_forget_person, access_log_prune, access_log_record
from tests.kit.admin import staff_client
from tests.kit.api import Caller, build_context, post_ok
from tests.kit.factories import MemoryItemFactory, ThreadFactory

TURNS = [("user", "We are planning a trip to Porto in May."), ("assistant", "Porto in May is lovely.")]


def test_a_context_build_logs_what_it_sent_and_counts_items_in_the_same_statement(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    city = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto")
    with CaptureQueriesContext(connection) as queries:
        built = build_context(alice, strategy="recent", max_tokens=3000)
    assert [f["id"] for f in built["facts"]] == [city.id]

    row = AccessLog.objects.get()
    assert (row.agent_id, row.thread_id, row.user_id, row.source) == (alice.agent.pk, thread.pk, "u-ana", "context")
    sent = [m["entry_id"] for m in built["messages"] if "entry_id" in m]
    assert row.entry_ids == sent and set(sent) == set(Entry.objects.values_list("id", flat=True))
    assert row.item_ids == [city.id]
    city.refresh_from_db()
    assert city.times_retrieved == 1 and city.last_retrieved_at == row.at
    logging = [q["sql"] for q in queries.captured_queries if "memoryapp_accesslog" in q["sql"]]
    assert len(logging) == 1 and "UPDATE" in logging[0] and "times_retrieved" in logging[0]


def test_a_search_logs_its_hits(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    item = MemoryItemFactory(agent=alice.agent, attribute="trip", value="plans a trip to Porto")
    answer = post_ok(alice.client, "/api/v1/search", {"text": "Porto trip", "method": "keyword"}, status=200)
    hits = {(h["kind"], h["id"]) for h in answer["results"]}
    assert ("item", item.id) in hits and any(kind == "entry" for kind, _ in hits)
    row = AccessLog.objects.get()
    assert row.source == "search" and row.thread_id is None and row.user_id == ""
    assert set(row.item_ids) == {i for k, i in hits if k == "item"}
    assert set(row.entry_ids) == {i for k, i in hits if k == "entry"}
    assert MemoryItem.objects.get(pk=item.pk).times_retrieved == 1

    post_ok(
        alice.client,
        "/api/v1/search",
        {"text": "Porto", "method": "keyword", "thread_id": thread.external_id},
        status=200,
    )
    in_thread = AccessLog.objects.latest("id")
    assert (in_thread.thread_id, in_thread.user_id) == (thread.pk, "u-ana")


def test_another_agents_requests_log_nothing_of_alices(alice: Caller, mallory: Caller) -> None:
    ThreadFactory(agent=alice.agent, turns=TURNS)
    item = MemoryItemFactory(agent=alice.agent, attribute="trip", value="plans a trip to Porto")
    ThreadFactory(agent=mallory.agent, turns=[("user", "Porto?")])
    post_ok(mallory.client, "/api/v1/search", {"text": "Porto trip", "method": "keyword"}, status=200)
    build_context(mallory, strategy="hybrid", max_tokens=3000, current_input="Porto trip")
    alices = set(Entry.objects.filter(agent=alice.agent).values_list("id", flat=True)) | {item.id}
    for row in AccessLog.objects.all():
        assert row.agent_id == mallory.agent.pk
        assert not alices & set(row.item_ids + row.entry_ids)
    assert MemoryItem.objects.get(pk=item.pk).times_retrieved == 0


def test_the_item_page_shows_when_and_in_which_threads_it_was_used(alice: Caller, bob: Caller) -> None:
    city = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto")
    ThreadFactory(agent=alice.agent, turns=TURNS)
    ThreadFactory(agent=alice.agent, external_id="t-second", turns=TURNS)
    build_context(alice, strategy="recent", max_tokens=3000)
    build_context(alice, "t-second", strategy="recent", max_tokens=3000)
    # Another agent's row naming the same id (it cannot, but the page must not trust that) is not shown.
    other = ThreadFactory(agent=bob.agent, external_id="t-bobs")
    access_log_record(agent_id=bob.agent.pk, thread=other, source="context", item_ids=[city.id])

    page = staff_client(groups=("Reviewers",)).get(reverse("admin:memoryapp_memoryitem_change", args=[city.pk]))
    assert page.status_code == 200
    uses = page.content.decode().split('id="item-uses"')[1].split("</section>")[0]
    assert "sent to the agent 2 times" in uses
    assert "t-1" in uses and "t-second" in uses and "t-bobs" not in uses
    assert uses.count("<tr>") == 3  # the header and two uses


def test_access_log_prune_deletes_only_rows_older_than_the_cutoff(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent)
    now = timezone.now()
    access_log_record(agent_id=alice.agent.pk, thread=thread, source="context", at=now - timedelta(days=40))
    access_log_record(agent_id=alice.agent.pk, thread=thread, source="context", at=now - timedelta(days=10))
    assert access_log_prune(older_than=now - timedelta(days=30)) == 1
    assert list(AccessLog.objects.values_list("at", flat=True)) == [now - timedelta(days=10)]
    assert access_log_prune(older_than=now - timedelta(days=30)) == 0


def test_a_persons_access_rows_go_with_their_erasure(alice: Caller) -> None:
    ana = ThreadFactory(agent=alice.agent, turns=TURNS)
    ana_item = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto")
    ben = ThreadFactory(agent=alice.agent, external_id="t-ben", user_id="u-ben", turns=TURNS)
    ben_item = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Lyon", user_id="u-ben")
    ana_entries = list(Entry.objects.filter(thread=ana).values_list("id", flat=True))
    ben_entries = list(Entry.objects.filter(thread=ben).values_list("id", flat=True))
    access_log_record(
        agent_id=alice.agent.pk, thread=ana, source="context", item_ids=[ana_item.id], entry_ids=ana_entries
    )
    access_log_record(agent_id=alice.agent.pk, thread=None, user_id="u-ana", source="search", item_ids=[ana_item.id])
    # A search about nobody in particular that sent both people's memory.
    access_log_record(
        agent_id=alice.agent.pk,
        thread=None,
        source="search",
        item_ids=[ana_item.id, ben_item.id],
        entry_ids=[ana_entries[0], ben_entries[0]],
    )
    access_log_record(
        agent_id=alice.agent.pk, thread=ben, source="context", item_ids=[ben_item.id], entry_ids=ben_entries
    )

    report = access_log_forget_person(
        agent_id=alice.agent.pk, user_id="u-ana", item_ids=[ana_item.id], entry_ids=ana_entries
    )
    assert report == {"access_rows_deleted": 2, "access_rows_stripped": 1}
    rows = list(AccessLog.objects.order_by("id").values_list("user_id", "item_ids", "entry_ids"))
    assert rows == [("", [ben_item.id], [ben_entries[0]]), ("u-ben", [ben_item.id], ben_entries)]
    again = access_log_forget_person(
        agent_id=alice.agent.pk, user_id="u-ana", item_ids=[ana_item.id], entry_ids=ana_entries
    )
    assert again == {"access_rows_deleted": 0, "access_rows_stripped": 0}


def test_a_deleted_thread_takes_its_access_rows(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    build_context(alice, strategy="recent", max_tokens=3000)
    assert AccessLog.objects.count() == 1
    alice.client.delete(f"/api/v1/threads/{thread.external_id}")
    assert not AccessLog.objects.exists()


def test_the_daily_prune_job_keeps_the_retention_days(
    alice: Caller, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from governance.models import JobRun
    from memoryapp.tasks.access import access_log_prune_tick

    thread = ThreadFactory(agent=alice.agent)
    now = timezone.now()
    access_log_record(agent_id=alice.agent.pk, thread=thread, source="context", at=now - timedelta(days=400))
    access_log_record(agent_id=alice.agent.pk, thread=thread, source="context", at=now - timedelta(days=100))
    settings.ACCESS_LOG_RETENTION_DAYS = 365
    with django_capture_on_commit_callbacks(execute=True):
        access_log_prune_tick()
    run = JobRun.objects.get(kind="access_log_prune")
    assert run.status == "succeeded" and run.result == {"access_rows_deleted": 1, "retention_days": 365}
    assert AccessLog.objects.count() == 1
    settings.ACCESS_LOG_RETENTION_DAYS = 0
    with django_capture_on_commit_callbacks(execute=True):
        access_log_prune_tick()
    assert AccessLog.objects.count() == 1


def test_a_raw_delete_of_a_thread_takes_its_access_rows_and_runs_in_the_database(alice: Caller) -> None:
    """An erasure may delete threads with raw bulk deletes: the database itself cascades."""
    from django.db import connection as db

    from memoryapp.models import Thread, ThreadRun

    thread = ThreadFactory(agent=alice.agent)
    access_log_record(agent_id=alice.agent.pk, thread=thread, source="context", item_ids=["itm_x"])
    post_ok(alice.client, "/api/v1/threads/t-1/runs")
    assert AccessLog.objects.count() == ThreadRun.objects.count() == 1
    doomed = Thread.objects.filter(pk=thread.pk)
    doomed._raw_delete(doomed.db)  # type: ignore[attr-defined]
    with db.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # what the commit would check
    assert not AccessLog.objects.exists() and not ThreadRun.objects.exists()


def test_the_erasure_of_a_person_takes_their_access_rows_and_their_ids_out_of_others(alice: Caller) -> None:
    ana = ThreadFactory(agent=alice.agent, turns=TURNS)
    ana_item = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto")
    ben = ThreadFactory(agent=alice.agent, external_id="t-ben", user_id="u-ben", turns=TURNS)
    ben_item = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Lyon", user_id="u-ben")
    ana_entries = list(Entry.objects.filter(thread=ana).values_list("id", flat=True))
    ben_entries = list(Entry.objects.filter(thread=ben).values_list("id", flat=True))
    access_log_record(
        agent_id=alice.agent.pk, thread=ana, source="context", item_ids=[ana_item.id], entry_ids=ana_entries
    )
    access_log_record(
        agent_id=alice.agent.pk,
        thread=None,
        source="search",
        item_ids=[ana_item.id, ben_item.id],
        entry_ids=[ana_entries[0], ben_entries[0]],
    )

    counts = person_erase(user_id=ana.user_id, agent_ids=[alice.agent.pk])

    assert (counts["access_rows_deleted"], counts["access_rows_stripped"]) == (1, 1)
    rows = list(AccessLog.objects.values_list("user_id", "item_ids", "entry_ids"))
    assert rows == [("", [ben_item.id], [ben_entries[0]])]


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_log_is_one_statement_and_a_failed_one_leaves_the_connection_usable(
    alice: Caller,
) -> None:
    # A served request runs in autocommit: the log's setting and its statement go in one round trip
    # (issue 26), as one transaction of their own.
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    city = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto")
    assert not connection.in_atomic_block
    with CaptureQueriesContext(connection) as queries:
        assert access_log_record(agent_id=alice.agent.pk, thread=thread, source="context", item_ids=[city.id])
    assert len(queries.captured_queries) == 1
    assert "synchronous_commit" in queries.captured_queries[0]["sql"]
    city.refresh_from_db()
    assert city.times_retrieved == 1 and AccessLog.objects.count() == 1
    # A thread that is not there: the row breaks its foreign key, nothing is written, the request goes on.
    gone = Thread(pk=thread.pk + 1000, agent=alice.agent, external_id="gone")
    assert not access_log_record(agent_id=alice.agent.pk, thread=gone, source="context", item_ids=[city.id])
    city.refresh_from_db()
    assert city.times_retrieved == 1 and AccessLog.objects.count() == 1
    assert access_log_record(agent_id=alice.agent.pk, thread=thread, source="search", item_ids=[city.id])
    assert AccessLog.objects.count() == 2


def test_ids_sent_as_one_array_literal_are_logged_exactly_and_count_only_the_agents_items(
    alice: Caller, mallory: Caller
) -> None:
    # The ids go to PostgreSQL as one array literal (issue 26: adapted in one go, not element by
    # element): any character an id may hold comes back as it was, and an item id of another agent
    # in the list counts nothing of hers.
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    city = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto")
    hers = MemoryItemFactory(agent=mallory.agent, attribute="city", value="lives in Faro")
    odd = ['a"b', "c\\d", "e,f", "{g}", "h i", "NULL", "j'k", "ünï"]
    assert access_log_record(
        agent_id=alice.agent.pk,
        thread=thread,
        source="context",
        item_ids=[city.id, hers.id, city.id],
        entry_ids=[*odd, "", odd[0]],
    )
    row = AccessLog.objects.get()
    assert row.entry_ids == odd and row.item_ids == [city.id, hers.id]
    city.refresh_from_db()
    hers.refresh_from_db()
    assert (city.times_retrieved, hers.times_retrieved) == (1, 0)
    assert access_log_record(agent_id=alice.agent.pk, thread=thread, source="search")
    assert AccessLog.objects.order_by("-pk").values_list("item_ids", "entry_ids")[0] == ([], [])
