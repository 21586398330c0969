"""Querysets compiled once per process (memoryapp.precompiled): the rows are the ORM's rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Model
from django.db.models.signals import post_init
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryapp.errors import NotFound
from memoryapp.items import selectors
from memoryapp.items.selectors import context_facts, thread_context_scope
from memoryapp.models import Thread
from memoryapp.precompiled import Precompiled, ReturnedRows, models_loaded, read_together
from memoryapp.threads.selectors import thread_for_agent
from tests.kit.api import Caller
from tests.kit.factories import MemoryItemFactory, ThreadFactory


def values(row: Model) -> dict[str, Any]:
    return {field.attname: getattr(row, field.attname) for field in row._meta.concrete_fields}


@pytest.mark.django_db
def test_a_precompiled_lookup_gives_the_row_the_orm_gives(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-p", user_id="u-ana", metadata={"topic": ["rome", 1]})
    Thread.objects.filter(pk=thread.pk).update(extraction={"off": [[1, 2]]}, history_tokens=17)
    expected = Thread.objects.get(pk=thread.pk)
    for for_update in (False, True, False):
        found = thread_for_agent(agent=alice.agent, external_id="t-p", for_update=for_update)
        assert values(found) == values(expected)
        assert found.metadata == {"topic": ["rome", 1]} and found.extraction == {"off": [[1, 2]]}
        assert not found._state.adding and found._state.db == "default"
        assert found.agent is alice.agent  # no query for it


@pytest.mark.django_db
def test_a_precompiled_lookup_is_scoped_like_the_orm_one(alice: Caller, bob: Caller) -> None:
    ThreadFactory(agent=bob.agent, external_id="t-bob")
    with pytest.raises(NotFound):
        thread_for_agent(agent=alice.agent, external_id="t-bob")
    with pytest.raises(NotFound):
        thread_for_agent(agent=alice.agent, external_id="t-bob", for_update=True)


@pytest.mark.django_db
def test_the_lock_is_taken_in_the_same_statement(alice: Caller) -> None:
    ThreadFactory(agent=alice.agent, external_id="t-l")
    with CaptureQueriesContext(connection) as queries:
        thread_for_agent(agent=alice.agent, external_id="t-l", for_update=True)
    assert len(queries.captured_queries) == 1
    assert queries.captured_queries[0]["sql"].endswith("FOR UPDATE")


@pytest.mark.django_db
def test_a_queryset_whose_parameters_are_not_its_arguments_goes_through_the_orm(alice: Caller) -> None:
    ThreadFactory(agent=alice.agent, external_id="trip-rome")
    ThreadFactory(agent=alice.agent, external_id="trip-lisbon")
    # `contains` sends %rome%, not the argument: it cannot be precompiled, and is not.
    containing = Precompiled(
        lambda agent_id, part: Thread.objects.filter(agent_id=agent_id, external_id__contains=part).order_by("pk"),
        -1,
        "\x00part",
    )
    assert [t.external_id for t in containing.rows(alice.agent.pk, "rome")] == ["trip-rome"]
    assert [t.external_id for t in containing.rows(alice.agent.pk, "trip")] == ["trip-rome", "trip-lisbon"]
    assert containing.first(alice.agent.pk, "paris") is None


@pytest.mark.django_db(transaction=True)
def test_a_precompiled_lock_outside_a_transaction_is_refused_as_the_orm_refuses_it(alice: Caller) -> None:
    # The ORM raises when it compiles a select_for_update in autocommit; a statement compiled once
    # (inside a transaction, by the first append) must not lock nothing silently afterwards.
    ThreadFactory(agent=alice.agent, external_id="t-a")
    with transaction.atomic():
        thread_for_agent(agent=alice.agent, external_id="t-a", for_update=True)
    with pytest.raises(TransactionManagementError):
        Thread.objects.select_for_update().filter(agent=alice.agent, external_id="t-a").first()
    with pytest.raises(TransactionManagementError):
        thread_for_agent(agent=alice.agent, external_id="t-a", for_update=True)
    assert thread_for_agent(agent=alice.agent, external_id="t-a").external_id == "t-a"


@pytest.mark.django_db
def test_a_queryset_with_constants_is_precompiled_with_twin_stand_ins(alice: Caller) -> None:
    # The scope's '' of an IN list is the statement's constant, told apart from the arguments by a
    # second compilation with other stand-ins (issue 26: a context's facts).
    ThreadFactory(agent=alice.agent, external_id="t-x", user_id="")
    ThreadFactory(agent=alice.agent, external_id="t-y", user_id="u-ana")
    ThreadFactory(agent=alice.agent, external_id="t-z", user_id="u-bo")
    of_user = Precompiled(
        lambda agent_id, user_id: Thread.objects.filter(agent_id=agent_id, user_id__in=["", user_id]).order_by("pk"),
        -1,
        "\x00user",
        twins=(-2, "\x00user2"),
    )
    assert [t.external_id for t in of_user.rows(alice.agent.pk, "u-ana")] == ["t-x", "t-y"]
    assert [t.external_id for t in of_user.rows(alice.agent.pk, "")] == ["t-x"]
    assert of_user._compiled is not None and of_user._compiled.constants.count("") == 1


@pytest.mark.django_db
def test_a_clock_read_inside_the_queryset_is_no_constant(alice: Caller) -> None:
    # A value the queryset computes itself differs between the two compilations: not precompiled, so
    # every call reads the clock anew through the ORM.
    ThreadFactory(agent=alice.agent, external_id="t-now")
    since = Precompiled(
        lambda agent_id: Thread.objects.filter(agent_id=agent_id, created_at__lte=timezone.now()),
        -1,
        twins=(-2,),
    )
    assert [t.external_id for t in since.rows(alice.agent.pk)] == ["t-now"]
    assert since._compiled is None and since._refused


@pytest.mark.django_db
def test_a_contexts_facts_read_precompiled_are_the_orms(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-f", user_id="u-ana")
    MemoryItemFactory(agent=alice.agent, subject="Ana", attribute="city", value="Lisbon", user_id="u-ana")
    MemoryItemFactory(agent=alice.agent, subject="Ana", attribute="pet", value="a cat", user_id="")
    MemoryItemFactory(agent=alice.agent, subject="Bo", attribute="city", value="Porto", user_id="u-bo")
    scope = thread_context_scope(thread)
    args = (scope.user_id, scope.project_id, scope.thread_id)
    found = context_facts(agent=alice.agent, user_id=args[0], project_id=args[1], thread_id=args[2])
    assert selectors._FACTS._compiled is not None  # precompiled, not refused
    orm = context_facts(agent=alice.agent, user_id=args[0], project_id=args[1], thread_id=args[2], purpose="none")
    assert sorted(f.text for f in found) == sorted(f.text for f in orm) == ["Ana city: Lisbon", "Ana pet: a cat"]


def test_reads_sent_together_give_each_its_own_rows_in_one_round_trip(alice: Caller) -> None:
    # A context build sends its memory files', facts' and window's reads as one (issue 26): each
    # statement's rows are those it reads alone, built as the ORM builds them.
    thread = ThreadFactory(agent=alice.agent, external_id="t-t", user_id="u-ana")
    MemoryItemFactory(agent=alice.agent, subject="Ana", attribute="city", value="Lisbon 100%", user_id="u-ana")
    scope = thread_context_scope(thread)
    alone = context_facts(agent=alice.agent, user_id=scope.user_id, project_id="", thread_id=scope.thread_id)
    facts = selectors.context_facts_read(agent=alice.agent, user_id=scope.user_id, thread_id=scope.thread_id)
    assert facts is not None
    with CaptureQueriesContext(connection) as queries:
        found = read_together(
            facts[0],
            [("SELECT %(a)s::int, '50%%'", {"a": 7}), facts[1:], ("SELECT 1 WHERE false", ())],
        )
    assert len(queries.captured_queries) == 1
    assert found[0] == [(7, "50%")] and found[2] == []
    together = context_facts(
        agent=alice.agent,
        user_id=scope.user_id,
        thread_id=scope.thread_id,
        states=selectors.context_facts_states(found[1]),
    )
    assert [(f.item_id, f.text) for f in together] == [(f.item_id, f.text) for f in alone]
    assert [f.text for f in together] == ["Ana city: Lisbon 100%"]


@pytest.mark.django_db
def test_a_returned_row_built_in_place_is_the_row_from_db_builds(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-r", user_id="u-ana", metadata={"topic": ["rome", 1]})
    Thread.objects.filter(pk=thread.pk).update(extraction={"off": [[1, 2]]}, history_tokens=17)
    returned = ReturnedRows(Thread)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {returned.columns('t')} FROM memoryapp_thread t WHERE t.id = %s", [thread.pk])
        row = cursor.fetchone()
    built = returned.build(row)
    expected = Thread.objects.get(pk=thread.pk)
    assert type(built) is Thread and values(built) == values(expected)
    assert built.metadata == {"topic": ["rome", 1]} and built.extraction == {"off": [[1, 2]]}
    assert not built._state.adding and built._state.db == "default" and built._state.fields_cache == {}
    assert set(built.__dict__) == set(expected.__dict__)
    # A listener of the init signals gets its call: the row is then built by from_db.
    seen: list[Any] = []

    def listener(sender: Any, instance: Any, **kwargs: Any) -> None:
        seen.append(instance)

    post_init.connect(listener, sender=Thread)
    try:
        again = returned.build(row)
    finally:
        post_init.disconnect(listener, sender=Thread)
    assert seen == [again] and values(again) == values(expected)


@pytest.mark.django_db
def test_rows_loaded_by_name_in_any_order_are_from_dbs_rows_with_the_rest_deferred(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-l", user_id="u-ana", metadata={"topic": "lisbon"})
    names = ["user_id", "external_id", "id"]  # not the fields' order; the others deferred
    row = ("u-ana", "t-l", thread.pk)
    expected = Thread.objects.only(*names).get(pk=thread.pk)
    built = models_loaded(Thread, "default", names, [row])[0]
    assert type(built) is Thread and not built._state.adding and built._state.db == "default"
    assert (built.pk, built.external_id, built.user_id) == (thread.pk, "t-l", "u-ana")
    assert built.get_deferred_fields() == expected.get_deferred_fields()
    # With a listener of the init signals, from_db builds them, from the values put in its order.
    seen: list[Any] = []

    def listener(sender: Any, instance: Any, **kwargs: Any) -> None:
        seen.append(instance)

    post_init.connect(listener, sender=Thread)
    try:
        again = models_loaded(Thread, "default", names, [row])[0]
    finally:
        post_init.disconnect(listener, sender=Thread)
    assert seen == [again] and (again.pk, again.external_id, again.user_id) == (thread.pk, "t-l", "u-ana")
    assert again.get_deferred_fields() == expected.get_deferred_fields()
