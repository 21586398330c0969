"""A person id with letters outside ASCII is found in the job runs that name it, as any other."""

from __future__ import annotations

from typing import Any

import pytest

from memoryapp.forgetting.person import person_erase_plan
from tests.kit.factories import AgentFactory, JobRunFactory


def _runs_naming(user_id: str) -> int:
    agent = AgentFactory()
    JobRunFactory(agent_id=agent.pk, arguments={"user_id": user_id})
    JobRunFactory(agent_id=agent.pk, result={"sent_to": [user_id]})
    JobRunFactory(agent_id=agent.pk, arguments={"user_id": "u-zoe"})
    return person_erase_plan(user_id=user_id, agent_ids=[agent.pk])["job_runs"]


@pytest.mark.parametrize("user_id", ["u-zoë", "u-名前"])
def test_a_person_id_outside_ascii_is_found_in_job_runs(db: None, user_id: str) -> None:
    assert _runs_naming(user_id) == 2


def test_a_person_id_outside_ascii_is_found_in_sealed_job_results(encrypted: Any, db: None) -> None:
    assert _runs_naming("u-zoë") == 2
