"""Whether a search's item scope holds any item: the statement built once per process answers what
the ORM's EXISTS of the scope's items answers (issue 26), for every shape of scope."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memoryapp.models import Agent, MemoryItem, Thread
from memoryapp.search.retrieval import items_searchable, items_searchable_live, search
from tests.kit.api import Caller
from tests.kit.factories import MemoryItemFactory, ThreadFactory

WHEN = [None, datetime(2020, 1, 1, tzinfo=UTC), datetime(2999, 1, 1, tzinfo=UTC)]
PURPOSES = ["", "support", "marketing"]


def _scopes(agent: Agent) -> list[dict[str, Any]]:
    threads = [
        ThreadFactory(agent=agent, external_id="t-ana", user_id="u-ana"),
        ThreadFactory(agent=agent, external_id="t-bo", user_id="u-bo", metadata={"project_id": "p-1"}),
        ThreadFactory(agent=agent, external_id="t-none"),
    ]
    return [
        {},
        {"user_id": "u-ana"},
        {"user_id": "u-bo"},
        {"user_id": "u-cy"},
        *({"thread": thread} for thread in threads),
    ]


def _agreeing(agent: Agent, scopes: list[dict[str, Any]]) -> list[bool]:
    answers = []
    for scope in scopes:
        for as_of in WHEN:
            for purpose in PURPOSES:
                args = {**scope, "as_of": as_of, "purpose": purpose}
                live = items_searchable_live(agent=agent, **args)
                assert live == items_searchable(agent=agent, **args).exists(), args
                answers.append(live)
    return answers


@pytest.mark.django_db
def test_the_items_check_answers_what_the_orm_answers_in_every_scope(alice: Caller, bob: Caller) -> None:
    agent = alice.agent
    Agent.objects.filter(pk=agent.pk).update(purposes=["support", "marketing"])
    agent.refresh_from_db()
    scopes = _scopes(agent)
    MemoryItemFactory(agent=bob.agent, user_id="", attribute="bob's", value="not alice's")
    assert not any(_agreeing(agent, scopes))  # another agent's items are none of alice's
    MemoryItemFactory(agent=agent, user_id="u-ana", thread_id="t-ana", attribute="tea", purposes=["support"])
    first = _agreeing(agent, scopes)
    MemoryItemFactory(
        agent=agent, user_id="", project_id="p-1", attribute="editor", valid_from=datetime(2021, 1, 1, tzinfo=UTC)
    )
    second = _agreeing(agent, scopes)
    MemoryItemFactory(
        agent=agent,
        user_id="",
        attribute="city",
        valid_from=datetime(2019, 1, 1, tzinfo=UTC),
        valid_to=datetime(2022, 1, 1, tzinfo=UTC),
    )
    third = _agreeing(agent, scopes)
    assert any(first) and not all(first)
    assert first != second != third


@pytest.mark.django_db
def test_a_search_without_items_in_its_scope_runs_no_item_channel(alice: Caller) -> None:
    thread: Thread = ThreadFactory(agent=alice.agent, external_id="t-1", turns=[("user", "green tea with Ana")])
    MemoryItemFactory(agent=alice.agent, user_id="u-other", attribute="tea", value="green tea")
    outcome = search(agent=alice.agent, text="green tea", thread=thread, method="keyword")
    assert [h.kind for h in outcome.hits] == ["entry"]
    assert outcome.channel_lists[("item", "keyword")] == []
    anywhere = search(agent=alice.agent, text="green tea", method="keyword")
    assert sorted(h.kind for h in anywhere.hits) == ["entry", "item"]
    assert MemoryItem.objects.filter(agent=alice.agent).count() == 1
