"""Erasures interrupted, finished (issue 25 §4): a person left marked as being erased.

An erasure marks the person (memoryapp.subjects.erasing) before it goes through the rows naming
them, and the mark goes at its end (a person with no identifier is marked too). Killed in between (a worker past its
time limit, a web process of an agent's `forget` killed by its server's timeout), it leaves the
mark: every write naming the person keeps storing the placeholder, and nothing else finishes it.

1. `erasures_marked` lists the marks, each told running (its eraser holds the person's
   `locks.ERASURE_RUN`) or interrupted. Staff see both on the person's page and the request's.
2. A mark a staff request stands behind (one of the person's requests queued, running, failed or
   blocked by a legal hold, covering that agent) is the request's to finish: the job sweep requeues a run whose worker
   died, the beat fails one whose job run is no longer running (`erasure_requests_lost`) and runs a
   failed one again when its error passes by itself (bounded, with backoff:
   governance.erasure.services.erasure_requests_retry_due), the officer any other once its cause
   is fixed (its page says which, and that the person is still marked). The sweep here sends no
   resume of its own: it would race the request.
3. Any other mark (an agent's `forget`, which has no request) gets one resume job
   (`erasures_resume`, beat): named by the mark's row (`ErasureMark`), never by the person, it
   runs `person_erase` again for that agent in the mark's mode (idempotent: it takes what is
   left), with the identifiers the agent registered and those given with the interrupted call
   (kept, sealed, with the mark: memoryapp.subjects.erasing), and forgets the agent's export archives of the person as the `forget`
   does. One automatic try per mark: a failed run stays in the job runs, the mark on the pages.
   A mark whose person, or one of her threads, is under a legal hold in force in that agent
   (placed since the `forget` started; the match of staff requests, `holds_in_the_way`) is left
   alone, as a blocked request's is: no resume is sent, and a resume sent before the hold skips
   (it reads the holds under her eraser lock, `erasure_gate`: memoryapp.subjects.erasing step 6);
   the beat's next look after the hold is lifted sends it.
4. The resume makes the erasure's choices again, all of them, as the mark keeps them: its
   `mentions` ("keep" leaves the mentions) and every group excluded with the reason recorded (the
   participants lists too, which are no table of the index). Its audit record
   (`erasure.resumed`) and its job run's result say which groups it kept and why. A mark written
   before it kept them (`mentions` "", memoryapp 0064) has its choices read from what there is
   (`_choices_of_old_mark`), erring towards keeping: a group kept can still be erased by a new
   request, a mention redacted cannot be had back, and the officer's reason may be a legal one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import Q

from governance.audit.chain import audit_append
from governance.erasure.services import holds_in_the_way
from governance.export.services import exports_forget_person
from governance.jobs.broker import job_enqueue
from governance.models import ErasureRequest, JobRun
from memoryapp.forgetting.mentions import GROUPS, PARTICIPANTS
from memoryapp.forgetting.person import person_erase
from memoryapp.models import ErasureMark, SubjectMention
from memoryapp.subjects.erasing import ErasureMarked, erasure_gate, erasures_marked

RESUME_KIND = "erasure_resume"
RESUME_TASK = "governance.tasks.erasure_resume_job"
ACTOR = "erasure:resume"
# The requests that stand behind a mark (step 2): the job sweep or the officer finishes them. A
# blocked one too (a legal hold placed since its run was interrupted stopped its retry): the
# officer runs it again once the hold is lifted; a resume of its own would erase under the hold.
REQUEST_OPEN = (
    ErasureRequest.Status.QUEUED,
    ErasureRequest.Status.RUNNING,
    ErasureRequest.Status.FAILED,
    ErasureRequest.Status.BLOCKED,
)


def request_behind(*, agent_id: int, user_id: str) -> ErasureRequest | None:
    """The person's staff request that covers the agent and is not finished, if any (step 2)."""
    covering = Q(agent_ids=[]) | Q(agent_ids__contains=[agent_id])
    return ErasureRequest.objects.filter(covering, user_id=user_id, status__in=REQUEST_OPEN).order_by("-pk").first()


def requests_behind(marks: Iterable[ErasureMarked]) -> dict[tuple[int, str], ErasureRequest]:
    """`request_behind` of each mark, by (agent, person), in one query (a page lists many marks)."""
    marks = list(marks)
    behind: dict[tuple[int, str], ErasureRequest] = {}
    if not marks:
        return behind
    people = {mark.user_id for mark in marks}
    open_requests = ErasureRequest.objects.filter(user_id__in=people, status__in=REQUEST_OPEN).order_by("-pk")
    for request in open_requests:
        for mark in marks:
            key = (mark.agent_id, mark.user_id)
            covers = not request.agent_ids or mark.agent_id in request.agent_ids
            if key not in behind and mark.user_id == request.user_id and covers:
                behind[key] = request
    return behind


def _tried(mark: ErasureMarked) -> bool:
    """A resume run of this mark already failed (one automatic try per mark, step 3)."""
    return JobRun.objects.filter(
        kind=RESUME_KIND,
        agent_id=mark.agent_id,
        arguments__mark=mark.mark_id,
        status=JobRun.Status.FAILED,
        created_at__gte=mark.since,
    ).exists()


def erasures_resume() -> dict[str, int]:
    """The beat's look at the marks (steps 1 to 3): counts of marks running, left to their request,
    held (a legal hold in force stands behind it), already tried, and sent a resume job."""
    counts = {"running": 0, "requests": 0, "held": 0, "tried": 0, "resumed": 0}
    for mark in erasures_marked():
        if mark.running:
            counts["running"] += 1
        elif request_behind(agent_id=mark.agent_id, user_id=mark.user_id) is not None:
            counts["requests"] += 1
        elif holds_in_the_way(user_id=mark.user_id, agent_ids=[mark.agent_id]):
            counts["held"] += 1
        elif _tried(mark):
            counts["tried"] += 1
        else:
            job_enqueue(
                kind=RESUME_KIND,
                task_name=RESUME_TASK,
                arguments={"mark": mark.mark_id},
                agent_id=mark.agent_id,
                dedupe_key=f"{RESUME_KIND}:{mark.mark_id}",
            )
            counts["resumed"] += 1
    return counts


def _choices_of_old_mark(*, agent_id: int, user_id: str, keeps: list[str]) -> tuple[str, dict[str, str]]:
    """The `mentions` and excluded groups of a mark written before it kept them (step 4): it has
    only the excluded groups that are tables (`keeps`). An agent's `forget` excludes none of its
    own: no table kept is "redact", every table kept is "keep" (which leaves the participants lists
    to the erasure). A staff request is never deleted: the person's latest one covering the agent
    whose tables excluded are the mark's gives its groups and reasons. Any other mark keeps its
    tables and the participants lists as well (a group that may have been excluded, unknown)."""
    tables = set(SubjectMention.Table.values)
    for request in ErasureRequest.objects.filter(user_id=user_id).order_by("-pk"):
        covers = not request.agent_ids or agent_id in request.agent_ids
        excluded = {str(group): str(why) for group, why in (request.excluded or {}).items() if group in GROUPS}
        if covers and set(excluded) & tables == set(keeps):
            return "redact", excluded
    if not keeps:
        return "redact", {}
    if set(keeps) == tables:
        return "keep", {}
    return "redact", {**dict.fromkeys(keeps, ""), PARTICIPANTS: ""}


def erasure_resume(*, mark_id: int | None, run: JobRun | None = None) -> dict[str, Any]:
    """The resume job's body (step 3); guarded on the mark: gone (the erasure finished, or its
    request is running it now) is a skip, so a run sent twice or late changes nothing. It makes
    the erasure's choices again (step 4)."""
    marked = (
        ErasureMark.objects.filter(pk=mark_id)
        .values_list("agent_id", "user_id", "mode", "keeps", "mentions", "excluded")
        .first()
        if mark_id is not None
        else None
    )
    if marked is None:
        return {"skipped": "no such mark"}
    agent_id, user_id, mode, keeps, mentions, excluded = marked
    if request_behind(agent_id=agent_id, user_id=user_id) is not None:
        return {"skipped": "a request stands behind it"}
    old = not mentions
    if old:
        mentions, excluded = _choices_of_old_mark(agent_id=agent_id, user_id=user_id, keeps=list(keeps or ()))
    excluded = {str(group): str(why) for group, why in (excluded or {}).items()}
    # The holds read under her eraser lock (memoryapp.subjects.erasing step 6), held to the end.
    with erasure_gate(
        user_id=user_id, agent_ids=[agent_id], holds=lambda: holds_in_the_way(user_id=user_id, agent_ids=[agent_id])
    ) as gate:
        if gate.holds:  # placed since the beat sent it: the beat sends another once they are lifted
            return {"skipped": "legal holds", "holds": gate.holds}
        counts = person_erase(
            user_id=user_id,
            agent_ids=[agent_id],
            mode=mode or "erase",
            actor=ACTOR,
            mentions=mentions,
            exclude=excluded,
            keep_job_ids=[run.pk] if run is not None else (),
        )
        done = {kind: n for kind, n in counts.items() if n}
        with transaction.atomic():
            exports_forget_person(user_id=user_id, actor=ACTOR, agent_id=agent_id)
            # The choices it made, as the erasure's first run recorded them: ids and groups, no person.
            audit_append(
                action="erasure.resumed",
                actor=ACTOR,
                agent_id=agent_id,
                subject=str(mark_id),
                details={
                    "mark": mark_id,
                    "mode": mode or "erase",
                    "mentions": mentions,
                    "excluded": excluded,
                    "old_mark": old,
                    "counts": done,
                },
            )
    return {"counts": done, "mentions": mentions, "excluded": excluded}
