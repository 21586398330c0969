"""Sealed values written by an UPDATE (a job run's end, its scrub by an erasure) are sealed under
the row's owner's key, as a save seals them: a rotation finds nothing to move afterwards."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection

from governance.crypto.rotation import encryption_rotate
from governance.crypto.sealing import sealed_key_id
from governance.jobs.runs import job_finish, job_skip
from governance.models import DataKey, JobRun
from memoryapp.forgetting.person import person_erase
from tests.kit.api import Caller
from tests.kit.factories import JobRunFactory


def _result_key(run: JobRun) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT result #>> '{}' FROM governance_jobrun WHERE id = %s", [run.pk])
        stored = str(cursor.fetchone()[0])
    assert stored.startswith("enc:v1:")
    return sealed_key_id(stored)


def _own_key(agent_id: int | None) -> str:
    return str(DataKey.objects.get(agent_id=agent_id, user_id="", destroyed_at__isnull=True).pk)


def test_a_job_runs_end_seals_its_result_under_its_agents_key(encrypted: Any, db: None, alice: Caller) -> None:
    mine = JobRunFactory(agent_id=alice.agent.pk)
    nobodys = JobRunFactory(agent_id=None)

    job_finish(mine, {"summary": "quokkaparade handled"})
    job_skip(nobodys, "nothing to do")

    assert _result_key(mine) == _own_key(alice.agent.pk) != _result_key(nobodys) == _own_key(None)
    assert JobRun.objects.get(pk=mine.pk).result == {"summary": "quokkaparade handled"}
    assert encryption_rotate(settle=0)["rows_resealed"]["governance_jobrun"] == 0


def test_an_erasure_scrubs_the_runs_naming_the_person_under_each_runs_agents_key(
    encrypted: Any, db: None, alice: Caller, bob: Caller
) -> None:
    runs = [JobRunFactory(agent_id=agent.pk, arguments={"user_id": "u-ana"}) for agent in (alice.agent, bob.agent)]
    for run in runs:
        job_finish(run, {"user": "u-ana"})

    person_erase(user_id="u-ana")

    for run, agent in zip(runs, (alice.agent, bob.agent), strict=True):
        assert JobRun.objects.get(pk=run.pk).result == {"erased": True}
        assert _result_key(run) == _own_key(agent.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT arguments::text FROM governance_jobrun ORDER BY id")
        assert [json.loads(row[0]) for row in cursor.fetchall()] == [{"erased": True}, {"erased": True}]
