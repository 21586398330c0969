"""Legal holds in force, and which of them block an action over a person, agents or threads."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from governance.retention.held import holds_blocking
from memoryapp.models import Agent, LegalHold
from tests.kit.factories import AgentFactory

pytestmark = pytest.mark.django_db


def _hold(**target: object) -> LegalHold:
    return LegalHold.objects.create(reason="litigation 2026-17", placed_by="pat", **target)


def test_person_hold_blocks_that_person_in_its_agent_only() -> None:
    alice: Agent = AgentFactory(slug="alice")
    bob: Agent = AgentFactory(slug="bob")
    hold = _hold(agent=alice, user_id="u-ana")

    assert holds_blocking(user_id="u-ana", agent_ids=[alice.pk]) == [hold]
    assert holds_blocking(user_id="u-ana") == [hold]
    assert holds_blocking(user_id="u-ana", agent_ids=[bob.pk]) == []
    assert holds_blocking(user_id="u-ben", agent_ids=[alice.pk]) == []


def test_all_agents_person_hold_blocks_in_every_agent() -> None:
    bob: Agent = AgentFactory(slug="bob")
    hold = _hold(user_id="u-ana")

    assert holds_blocking(user_id="u-ana", agent_ids=[bob.pk]) == [hold]
    # An action over bob's whole data meets it too.
    assert holds_blocking(agent_ids=[bob.pk]) == [hold]


def test_thread_hold_blocks_that_thread_of_its_agent() -> None:
    alice: Agent = AgentFactory(slug="alice")
    bob: Agent = AgentFactory(slug="bob")
    hold = _hold(agent=alice, thread_external_id="t-1")

    assert holds_blocking(thread_ids=["t-1"], agent_ids=[alice.pk]) == [hold]
    assert holds_blocking(user_id="u-ana", thread_ids=["t-2", "t-1"], agent_ids=[alice.pk]) == [hold]
    assert holds_blocking(thread_ids=["t-1"], agent_ids=[bob.pk]) == []
    assert holds_blocking(thread_ids=["t-2"], agent_ids=[alice.pk]) == []
    assert holds_blocking(user_id="u-ana", agent_ids=[alice.pk]) == []
    # Unique per agent only: with no agent named, erring on keeping.
    assert holds_blocking(thread_ids=["t-1"]) == [hold]
    assert holds_blocking(agent_ids=[alice.pk]) == [hold]
    assert holds_blocking(agent_ids=[bob.pk]) == []


def test_lifted_and_ended_holds_block_nothing() -> None:
    alice: Agent = AgentFactory(slug="alice")
    now = timezone.now()
    _hold(agent=alice, user_id="u-ana", lifted_at=now, lifted_by="pat")
    _hold(agent=alice, user_id="u-ana", ends_at=now - timedelta(seconds=1))
    later = _hold(agent=alice, user_id="u-ana", ends_at=now + timedelta(days=30))

    assert holds_blocking(user_id="u-ana", agent_ids=[alice.pk]) == [later]
    assert holds_blocking() == [later]


def test_a_hold_names_exactly_one_target() -> None:
    alice: Agent = AgentFactory(slug="alice")
    for target in (
        {"agent": alice},  # nothing held
        {"agent": alice, "user_id": "u-ana", "thread_external_id": "t-1"},  # two targets
        {"thread_external_id": "t-1"},  # a thread of no agent
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            _hold(**target)
