"""Querysets compiled once per process (memoryapp.precompiled): the rows are the ORM's rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Model
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from memoryapp.errors import NotFound
from memoryapp.models import Thread
from memoryapp.precompiled import Precompiled
from memoryapp.threads.selectors import thread_for_agent
from tests.kit.api import Caller
from tests.kit.factories import ThreadFactory


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
