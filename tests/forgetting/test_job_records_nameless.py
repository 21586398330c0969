"""Job records name a person only by pseudonym (issue 25 §5): the subject index's rebuild job of a
person, and the consolidation passes' results, written to the job table without the raw user id
(or a thread id of theirs); the rebuild still finds her, and after her erasure the record links to
no one and the job has nothing to do."""

from __future__ import annotations

from django.db import connection

from governance.models import JobRun
from memoryapp.subjects.index import subject_index_person
from memoryapp.tasks.subjects import subject_index_rebuild_job
from tests.kit.api import Caller, post_ok
from tests.kit.mentions import IDENTIFIERS, PERSON, plant


def _job_table_text() -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(string_agg(row_to_json(j)::text, ' '), '') FROM {JobRun._meta.db_table} j")
        return str(cursor.fetchone()[0])


def test_the_rebuild_job_of_a_person_names_her_by_pseudonym_only(alice: Caller) -> None:
    plant(alice)
    answer = alice.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json")
    assert answer.status_code == 200
    run = JobRun.objects.get(kind="subject_index", agent_id=alice.agent.pk)
    subject_index_rebuild_job(run.pk)  # as a worker runs it
    run.refresh_from_db()
    assert run.status == JobRun.Status.SUCCEEDED, run.error
    assert run.result["mentions"]["entry"] >= 2  # it found her through the pseudonym

    assert PERSON not in _job_table_text()

    post_ok(alice.client, f"/api/v1/users/{PERSON}/forget", {}, status=200)
    run.refresh_from_db()
    assert subject_index_person(run.arguments) is None  # her pseudonym links to no one now


def test_extraction_and_compaction_runs_name_a_thread_by_its_row_only(alice: Caller) -> None:
    """A client-chosen thread id (`trip:p-ines`) is as personal as a user id: the job records of
    the thread's extraction and compactions (requested, run in the request, automatic) keep the
    thread's row id, which the job-run page resolves to its name while the thread lives."""
    from memoryapp.compaction.services import compaction_now, compaction_request
    from memoryapp.extraction.services import extraction_request
    from memoryapp.models import Thread

    chosen = "trip:p-canary-7731"
    post_ok(alice.client, "/api/v1/threads", {"id": chosen, "user_id": PERSON}, status=201)
    post_ok(alice.client, f"/api/v1/threads/{chosen}/entries", {"role": "user", "content": "Book Lisbon."}, status=201)
    thread = Thread.objects.get(agent=alice.agent, external_id=chosen)
    extraction_request(thread=thread, actor="test")
    compaction_request(thread=thread, strategy="clear-old-tool-results")
    compaction_now(thread=thread, strategy="clear-old-tool-results")
    runs = JobRun.objects.filter(agent_id=alice.agent.pk, kind__in=["extraction", "compaction"])
    assert runs.count() >= 3 and all(run.arguments["thread_pk"] == thread.pk for run in runs)
    assert "canary-7731" not in _job_table_text()
