"""The governance pages at real sizes: hundreds of erasure and export requests, legal holds,
retention policies, compaction settings, job runs, and one item used hundreds of times.

Rows are written in bulk (the pages read them; the services that write them one by one are tested
elsewhere), with the long ids real systems hand out (uuid-like person ids, e-mail addresses), so a
page that cannot wrap them shows it. `n` is how many of each kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from governance.erasure.services import erasure_run
from governance.models import ErasureRequest, ExportRequest, JobRun
from memoryapp.agents.services import agent_get_or_create
from memoryapp.models import AccessLog, Agent, CompactionSettings, LegalHold, MemoryItem, RetentionPolicy
from memoryapp.threads.services import thread_create
from tests.kit.factories import MemoryItemFactory, ThreadFactory


def long_person(n: int) -> str:
    """A person's id as an identity provider hands it out: long, without a space to break at."""
    return f"auth0:{n:04d}-5f0c2a9e7b3d4c1e8a6f9b2d4e7c1a3f-pereira.ana.maria@example-health-insurer.org"


@dataclass(frozen=True)
class GovernanceRows:
    agents: list[Agent]
    item: MemoryItem  # sent to the agent in `n` context builds and searches
    finished_erasure: ErasureRequest  # done, with a report naming every table
    finished_export: ExportRequest


def governance_rows(n: int, *, batch: str = "eu") -> GovernanceRows:
    """`n` of each governance row (at least 3 agents), spread over the statuses each list shows.

    Called again with another `batch`, it adds as many more, with agents of their own."""
    now = timezone.now()
    agents = [
        agent_get_or_create(slug=f"customer-support-agent-{i:03d}-{batch}-west", name=f"Support agent {i}")[0]
        for i in range(max(3, min(n, 40)))
    ]
    runs = JobRun.objects.bulk_create(
        JobRun(
            kind=("erasure", "export", "embedding", "extraction", "compaction", "retention_prune")[i % 6],
            agent_id=agents[i % len(agents)].pk,
            status=("succeeded", "failed", "running", "queued", "skipped")[i % 5],
            progress_done=i % 50,
            progress_total=50,
            error="Traceback (most recent call last): OperationalError " + "x" * 300 if i % 5 == 1 else "",
            started_at=now - timedelta(minutes=i, seconds=30),
            finished_at=now - timedelta(minutes=i) if i % 5 in (0, 1, 4) else None,
            arguments={"request_id": i, "thread_id": f"t-{long_person(i)}"},
        )
        for i in range(n)
    )
    erasure_statuses = ErasureRequest.Status.values
    erasures = ErasureRequest.objects.bulk_create(
        ErasureRequest(
            user_id=long_person(i),
            identifiers=[f"ana.{i}@example.org", f"+351 91{i:07d}"],
            agent_ids=[a.pk for a in agents[: i % 4]],
            mode=("erase", "redact")[i % 2],
            legal_basis="GDPR Art. 17(1)(a): the data are no longer necessary for the purposes",
            reason="Her letter of 3 November, asking that everything about her be removed. " * 3,
            requested_by_name=f"staff:privacy-officer-with-a-long-name-{i}",
            status=erasure_statuses[i % len(erasure_statuses)],
            phase="scan",
            progress_done=i % 7,
            progress_total=7,
            job_run=runs[i],
        )
        for i in range(n)
    )
    finished_erasure = _erased(erasures[0], agents[0])
    exports = ExportRequest.objects.bulk_create(
        ExportRequest(
            user_id=long_person(i),
            agent_ids=[a.pk for a in agents[: 1 + i % len(agents)]],
            requested_by=f"staff:privacy-officer-with-a-long-name-{i}",
            status=ExportRequest.Status.values[i % len(ExportRequest.Status.values)],
            progress_done=i % 9,
            progress_total=9,
            job_run=runs[i],
            counts={"threads": 12, "entries": 4_812, "items": 311, "files": 4, "audit_records": 77},
            manifest_sha256="cd" * 32,
            error="the archive could not be written: " + "disk full " * 20 if i % 4 == 3 else "",
        )
        for i in range(n)
    )
    LegalHold.objects.bulk_create(
        LegalHold(
            agent=agents[i % len(agents)] if i % 3 else None,
            user_id=long_person(i) if i % 2 else "",
            thread_external_id="" if i % 2 else f"thread-{long_person(i)}",
            reason="Litigation hold: case 2026-CV-0042, counsel's letter of 2 March. " * 2,
            placed_by=f"staff:privacy-officer-with-a-long-name-{i}",
            ends_at=now + timedelta(days=30 + i) if i % 4 else None,
            lifted_at=now if i % 5 == 0 else None,
            lifted_by="staff:pia" if i % 5 == 0 else "",
        )
        for i in range(n)
        if i % 2 or i % 3  # a thread hold names its agent (the table's constraint)
    )
    policy_agents = agents[: n - 1] if n > 1 else []
    if not RetentionPolicy.objects.filter(agent=None).exists():
        RetentionPolicy.objects.create(agent=None, thread_ttl_days=365, job_run_days=30, updated_by="staff:otto")
    RetentionPolicy.objects.bulk_create(
        [
            RetentionPolicy(
                agent=agent,
                thread_ttl_days=30 + i,
                keep_checkpoints=3,
                drop_branches=bool(i % 2),
                suggested_review_days=14,
                inactive_item_days=90,
                job_run_days=30,
                tool_result_days=7,
                event_days=60,
                updated_by=f"staff:operator-with-a-long-name-{i}",
            )
            for i, agent in enumerate(policy_agents)
        ]
    )
    CompactionSettings.objects.bulk_create(
        CompactionSettings(
            agent=agent,
            enabled=bool(i % 2),
            summarizer_model="anthropic/claude-3-5-haiku-20241022-with-a-long-deployment-name",
        )
        for i, agent in enumerate(agents)
    )
    item = _item_used(agents[0], n, batch=batch)
    finished_export = exports[0]
    return GovernanceRows(agents, item, finished_erasure, finished_export)


def _item_used(agent: Agent, uses: int, *, batch: str) -> MemoryItem:
    """An item sent `uses` times, from threads of long ids and from searches outside any thread."""
    item = MemoryItemFactory(agent=agent, subject="Ana", attribute="sister", value="Lucinda, in Porto")
    threads = [
        thread_create(agent=agent, external_id=f"conversation-{batch}-{long_person(i)}", user_id=long_person(i))
        for i in range(min(uses, 30))
    ]
    now = timezone.now()
    AccessLog.objects.bulk_create(
        AccessLog(
            agent=agent,
            thread=threads[i % len(threads)] if i % 4 else None,
            user_id=long_person(i % 30),
            source=("context", "search")[i % 2],
            at=now - timedelta(minutes=i),
            item_ids=[item.pk],
        )
        for i in range(uses)
    )
    MemoryItem.objects.filter(pk=item.pk).update(times_retrieved=uses, last_retrieved_at=now)
    item.refresh_from_db()
    return item


def _erased(request: ErasureRequest, agent: Agent) -> ErasureRequest:
    """The request run to its end on a person with a thread and items: a real report."""
    ErasureRequest.objects.filter(pk=request.pk).update(status=ErasureRequest.Status.QUEUED, agent_ids=[], mode="erase")
    thread = ThreadFactory(
        agent=agent,
        external_id=f"t-{request.pk}-{request.user_id}",
        user_id=request.user_id,
        turns=[("user", "My sister Lucinda moved to Porto last spring."), ("assistant", "Noted.")] * 20,
    )
    MemoryItemFactory(agent=agent, subject="Ana", attribute="lives in", value="Porto", user_id=thread.user_id)
    erasure_run(request_id=request.pk)
    request.refresh_from_db()
    return request
