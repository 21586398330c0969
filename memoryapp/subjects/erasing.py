"""Writes against a person's erasure of mentions (issue 25 §4): a row naming them that a write
commits while their erasure runs is never left naming them.

The erasure scans the agent's rows for the person, then redacts what it found: a write committing
after its scan, naming her, was neither seen nor, once the index forgot her, marked. So:

1. The erasure first marks the person as being erased (`erasing_mark`: a row of `ErasureMark`,
   the groups the officer excluded in its `keeps`; a person with no identifier is marked too) in a
   transaction of its own, holding the lock `locks.ERASING` of the person exclusive, and commits
   before its scan.
2. A write that found a registered person in its rows (the write-time detector,
   memoryapp.subjects.detect) takes the same lock shared, in its transaction, then reads whether
   they are being erased (`people_erasing`: a statement after the lock, so it sees a mark that
   committed while it waited). The mark waits for every write that took the lock before it: those
   commit first, and the erasure's scan, which starts after the mark, sees their rows. Every write
   that takes it after reads the mark, and stores the placeholder of the erasure instead of the
   person's identifiers (`row_redact`, memoryapp.subjects.texts: the erasure's own replacement),
   records no mention of her and seals nothing under her key.
3. The mark goes at the erasure's end in the agent (`erasing_unmark`), after her registry rows
   and, in `erase` mode, her data key.
4. The process running the erasure holds the session lock `locks.ERASURE_RUN` of the person
   (`erasure_running`) from before the mark until past its end: a mark no process holds that lock
   for is an erasure interrupted (its worker killed, its request failed), shown to staff
   (`erasures_marked`) and finished by running it again (its request's retry, or
   governance.erasure.resume for an agent's `forget`, which has no request).
5. A message sent by the person (its sender, `metadata.userId`), or a thread made about them (or
   given to them, or taken from them), is refused while their erasure runs (`senders_erasing_refuse`: 409
   `person_being_erased`, naming the field, nothing stored): the erasure takes her threads and her
   messages in others' threads at one step each, and one written after that step would outlive it
   (a message sealed again under the thread's key as hers goes). Refused rather than
   stored with a placeholder: the text is her words, not a mention of her that a placeholder
   could stand for. The write takes her `locks.ERASURE_RUN` shared to its end (try, never wait):
   an erasure starting after it waits for it to commit, and its step takes the message with the rest.

A replacement of her identifiers (`PUT /users/{id}/identifiers`) takes the lock shared too (it
keeps the identifiers given with the erasure); the mark, a row of its own, stays.

6. Legal holds and the erasure, one rule (`erasure_gate`, `holds_placing`): an erasure reads the
   holds once it holds its lock, and a hold looks for that lock once it holds the person's holds
   gate, so one of the two is first. The erasure takes its lock before it changes anything (one
   agent: her `locks.ERASURE_RUN` there; several or every agent, a staff request: her
   `locks.ERASURE_PERSON`, one lock whatever their number, each agent's taken in turn as it goes),
   then reads the holds in force on her or her threads there (its caller's check: governance's,
   which this package may not import) with her `locks.HOLDS_GATE` taken shared for the read; one
   found stops it as it stands (the agent's `forget` a 409 `legal_hold`, a staff request
   `blocked`, a resume skipped). A hold's transaction takes that gate exclusive to its commit, then
   looks in `pg_locks` for an erasure of her holding its lock in an agent the hold covers. None: any
   erasure of her not yet begun reads the holds after the hold's commit (its read waits on the
   gate), and stops. One found: it read the holds, or reads them after this commit (then it stops:
   the warning errs on the side of telling), and goes on; the hold is placed all the same (the legal
   record, and it keeps what is left should that erasure be interrupted: its resume and its retry
   read it) and the agents are told, to be said to staff. Reading the holds before the lock, as the
   erasure did, missed a hold committed between the read and the lock. One lock a hold, one or two
   an erasure: a service of thousands of agents fills no lock table.

Cost: a write naming no registered person takes no lock and sends no query; one naming someone
sends two (the shared lock, the read), and waits only on the mark of a person it names: a
transaction that takes that lock first, holding nothing, then only her mark and registry rows,
which no write locks (a replacement of her identifiers waits for the lock before touching them). No cycle
goes through it, whatever the writes hold (threads, rows, the audit chain).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg.errors
from django.db import DatabaseError, OperationalError, connection, transaction
from django.utils import timezone

from governance import locks
from memoryapp.errors import Conflict
from memoryapp.models import Agent, ErasureMark
from memoryapp.models.people import thread_participants
from memoryapp.screening.identifiers import identifiers_given_keep


def _lock_numbers(agent_id: int, people: Iterable[str]) -> list[int]:
    return sorted({locks.person(agent_id, user_id) for user_id in people})


def erasing_mark(
    *,
    agent_id: int,
    user_id: str,
    keeps: Collection[str],
    mode: str = "erase",
    given: Mapping[str, Sequence[str]] | None = None,
    mentions: str = "",
    excluded: Mapping[str, str] | None = None,
) -> None:
    """Mark the person as being erased (step 1 of the module's docstring), in a transaction of its
    own that waits for the writes naming her in flight: her `ErasureMark` (a run again keeps its
    `since`), whether or not she has identifiers (with none, no write names her, but the mark is
    what shows the erasure interrupted and has it resumed). The identifiers `given` with the
    erasure are kept with the mark (`identifiers_given_keep`): sealed as registered ones, for the
    erasure's span, so writers find her by them and a resume uses them. `mentions` and `excluded`
    (every group left out, with its reason) are the erasure's choices, kept for its resume; a call
    without them (`mentions` "", the mentions' own mark) leaves those the mark has.

    Inside a caller's transaction (a dry run, rolled back) nothing is marked: writers read a mark
    only once committed, and holding its lock to the caller's end, over the rows the erasure then
    locks, would put it in a cycle with a write holding one of them."""
    if connection.in_atomic_block:
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [locks.ERASING, locks.person(agent_id, user_id)])
        # Before what it seals: a key of hers made for the identifiers given is made since the mark.
        now = timezone.now()
        # After the lock: a replacement of her identifiers (`identifiers_set`, which takes it
        # shared) committed; one after keeps the rows given here.
        identifiers_given_keep(agent_id=agent_id, user_id=user_id, given=given)
        chosen: dict[str, Any] = {"keeps": sorted(keeps), "mode": mode}
        if mentions:
            chosen.update(mentions=mentions, excluded=dict(sorted((excluded or {}).items())))
        ErasureMark.objects.update_or_create(
            agent_id=agent_id,
            user_id=user_id,
            defaults=chosen,
            create_defaults={**chosen, "since": now},
        )


def erasing_unmark(*, agent_id: int, user_id: str) -> None:
    """The person's erasure in the agent ended: her mark goes (step 3 of the module's docstring)."""
    ErasureMark.objects.filter(agent_id=agent_id, user_id=user_id).delete()


@contextmanager
def erasure_running(*, agent_id: int, user_id: str, wait: bool = True) -> Iterator[None]:
    """Hold the person's `locks.ERASURE_RUN` (a session lock) while their erasure runs here (step 4
    of the module's docstring), and a mark left behind by a process that died is told from one
    being worked on (`erasures_marked`). A second erasure of the same person waits for this one
    (a worker's job: a staff request, a resume); with `wait` False (a web request, the agent's
    `forget`) it is refused at once instead, 409 `erasure_running`: a web worker never waits on an
    erasure that may take minutes (the writes of her memory committing, which hold the lock shared,
    it waits for, briefly: `_lock_after_writers`).

    Inside a caller's transaction (a dry run) nothing is held: it marks nothing either."""
    if connection.in_atomic_block:
        yield
        return
    number = locks.person(agent_id, user_id)
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [locks.ERASURE_RUN, number])
        else:
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [locks.ERASURE_RUN, number])
            if not cursor.fetchone()[0]:
                _lock_after_writers(agent_id=agent_id, user_id=user_id, number=number)
    try:
        yield
    finally:
        # A killed process releases it with its connection; an error here does so now. A connection
        # that broke (the error being unwound, perhaps) freed it already: its unlock's own error
        # must not stand in for the erasure's in the job's report.
        with suppress(DatabaseError), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [locks.ERASURE_RUN, number])


@dataclass(frozen=True)
class ErasureGate:
    """An erasure's way in (step 6 of the module's docstring): the agents it covers, and the legal
    holds in force read once it held its lock (ids; any one stops the erasure before it changes
    anything)."""

    agent_ids: list[int]
    holds: list[int]


@contextmanager
def erasure_gate(
    *,
    user_id: str,
    agent_ids: Sequence[int] | None,
    holds: Callable[[], list[int]],
    wait: bool = True,
) -> Iterator[ErasureGate]:
    """Take the erasure's lock (one agent: her `locks.ERASURE_RUN` there, as `erasure_running` does,
    `wait` False a 409 `erasure_running` at once; several, or every agent (`agent_ids` None: those
    there are now): her `locks.ERASURE_PERSON`, one lock whatever the number of agents, while
    `person_erase` takes each agent's in turn), then read `holds()`, the caller's check of the legal
    holds in the way, behind any hold on her being placed (`_holds_read`): step 6 of the module's
    docstring. Held to the block's end, and let go however it ends (`person_erase`'s own
    `erasure_running` takes an agent's lock again in the same session: PostgreSQL counts a
    session's locks, and each is let go as often as taken).

    Inside a caller's transaction (a dry run) nothing is held, as `erasure_running`."""
    agents = Agent.objects.order_by("pk")
    if agent_ids is not None:
        agents = agents.filter(pk__in=list(agent_ids))
    covered = list(agents.values_list("pk", flat=True))
    if agent_ids is not None and len(covered) == 1:
        lock = erasure_running(agent_id=covered[0], user_id=user_id, wait=wait)
    else:
        lock = _person_erasing(user_id=user_id, wait=wait)
    with lock:
        yield ErasureGate(agent_ids=covered, holds=_holds_read(user_id=user_id, holds=holds))


@contextmanager
def _person_erasing(*, user_id: str, wait: bool) -> Iterator[None]:
    """Her `locks.ERASURE_PERSON` (a session lock) while an erasure of her in several agents runs:
    what a hold placed meanwhile finds (`holds_placing`). Another such erasure of her waits for it
    (`wait` False: 409 `erasure_running` at once)."""
    if connection.in_atomic_block:
        yield
        return
    number = locks.person_anywhere(user_id)
    with connection.cursor() as cursor:
        take = "pg_advisory_lock" if wait else "pg_try_advisory_lock"
        cursor.execute(f"SELECT {take}(%s, %s)", [locks.ERASURE_PERSON, number])
        if not wait and not cursor.fetchone()[0]:
            raise Conflict(
                "erasure_running",
                "This person is already being erased: nothing was erased by this call.",
                field="user_id",
            )
    try:
        yield
    finally:
        with suppress(DatabaseError), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [locks.ERASURE_PERSON, number])


def _holds_read(*, user_id: str, holds: Callable[[], list[int]]) -> list[int]:
    """`holds()`, read once no hold on her is being placed: her `locks.HOLDS_GATE` taken shared for
    the read (a hold holds it exclusive to its commit, a short transaction), so a hold either
    committed before the read, and is read, or takes the gate after it, when the erasure's own lock
    is there for the hold to find (`holds_placing`)."""
    if connection.in_atomic_block:
        return holds()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock_shared(%s, %s)", [locks.HOLDS_GATE, locks.person_anywhere(user_id)]
        )
        return holds()


@dataclass(frozen=True)
class ErasuresRunning:
    """What a hold being placed found (`holds_placing`): the agents (pk order) where an erasure of
    the person holds her lock, and whether an erasure of her in several agents runs (which agents
    it covers is its caller's to say: a staff request's)."""

    agent_ids: list[int]
    across_agents: bool


def holds_placing(*, agent_ids: Sequence[int], user_id: str) -> ErasuresRunning:
    """A legal hold on the person in these agents is being placed (step 6 of the module's
    docstring; call it inside the hold's transaction): take her `locks.HOLDS_GATE` exclusive to the
    commit (waiting, briefly, only for another hold of her or an erasure's read of the holds), then
    look for the erasures of her running (`pg_locks`: their lock granted, exclusive, to another
    session of this database; a write of her memory holds it shared, and is none). One not found has not read the holds yet: it reads them after this commit, and stops.
    One found read them, or reads them after this commit (then it stops: telling errs on that side);
    it is told to staff. Two statements, one lock, whatever the number of agents."""
    numbers = {agent_id: locks.person(agent_id, user_id) for agent_id in agent_ids}
    anywhere = locks.person_anywhere(user_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [locks.HOLDS_GATE, anywhere])
        cursor.execute(
            "SELECT DISTINCT classid::bigint, objid::bigint FROM pg_locks"
            " WHERE locktype = 'advisory' AND granted AND mode = 'ExclusiveLock' AND objsubid = 2"
            " AND pid <> pg_backend_pid()"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND ((classid = %s::oid AND objid::bigint = ANY(%s::bigint[])) OR (classid = %s::oid AND objid::bigint = %s))",
            [locks.ERASURE_RUN, sorted(set(numbers.values())), locks.ERASURE_PERSON, anywhere],
        )
        found = cursor.fetchall()
    running = {int(number) for lock_class, number in found if lock_class == locks.ERASURE_RUN}
    return ErasuresRunning(
        agent_ids=sorted(agent_id for agent_id, number in numbers.items() if number in running),
        across_agents=any(lock_class == locks.ERASURE_PERSON for lock_class, _ in found),
    )


# How long a web request's erasure waits for the writes of the person's memory in flight, each of
# which holds her eraser lock shared until it commits (`senders_erasing_refuse`): short transactions.
WRITERS_WAIT = "5s"


def _lock_after_writers(*, agent_id: int, user_id: str, number: int) -> None:
    """The person's eraser lock, which the try did not get (`erasure_running` with `wait` False):
    held by an eraser, a 409 `erasure_running` at once; held only shared, by writes of her memory
    committing (no erasure runs), taken once they did, waiting at most WRITERS_WAIT (then 503: the
    lock timeout is an outage to the middleware), a 409 again if an eraser took it meanwhile. The
    wait is queued: a write naming her that asks after it is refused as during her erasure."""
    if _eraser_holds(number):
        raise _erasure_running_conflict(agent_id=agent_id, user_id=user_id)
    try:
        # A session lock taken inside a transaction outlives it: the transaction only bounds the wait.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{WRITERS_WAIT}'")
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [locks.ERASURE_RUN, number])
    except OperationalError as error:
        if isinstance(error.__cause__, psycopg.errors.LockNotAvailable) and _eraser_holds(number):
            raise _erasure_running_conflict(agent_id=agent_id, user_id=user_id) from error
        raise


def _eraser_holds(number: int) -> bool:
    """Whether a process holds the person's eraser lock exclusive (an erasure runs), as
    `erasures_marked` tells it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted"
            " AND mode = 'ExclusiveLock' AND classid = %s::oid AND objid = %s::oid"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
            [locks.ERASURE_RUN, number],
        )
        return bool(cursor.fetchone()[0])


def _erasure_running_conflict(*, agent_id: int, user_id: str) -> Conflict:
    """409 for a second erasure of a person whose erasure runs: names the running one (since when,
    its mode) when it marked her, and says nothing was erased by this call."""
    running = [m for m in erasures_marked(user_id=user_id, agent_ids=[agent_id]) if m.running]
    which = (
        f" (an erasure in {running[0].mode} mode, running since {running[0].since.isoformat(timespec='seconds')})"
        if running
        else ""
    )
    return Conflict(
        "erasure_running",
        f"This person is already being erased{which}: nothing was erased by this call. It ends by itself; send "
        "it again once it ended to check (a second run finds what is left).",
        field="user_id",
    )


# The code of a write refused because a person it is of is being erased (a 409): a job that meets it
# skips (her memory goes with her erasure) rather than failing.
PERSON_BEING_ERASED = "person_being_erased"


def person_being_erased(*, agent_id: int, user_id: str) -> bool:
    """Whether the person's erasure runs in the agent (or is about to: its lock asked for), as a
    write of her memory would find it (`senders_erasing_refuse`): for a job about to work on her
    memory, which skips it instead of asking a model for what would be refused. One statement; the
    shared lock, when had, is let go with the transaction (a caller's, held to its end)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_try_advisory_xact_lock_shared(%s, %s)", [locks.ERASURE_RUN, locks.person(agent_id, user_id)]
        )
        return not cursor.fetchone()[0]


def senders_erasing_refuse(
    *, agent_id: int, senders: Mapping[str, str], what: str = "message", message: str = ""
) -> None:
    """Refuse a write of rows that are people's (the sender of a message; with `what` "thread",
    the person a thread is about) while one of them is being erased (step 5 of the module's
    docstring): `senders` maps each to the field naming them. Otherwise holds each one's eraser lock
    shared until the write's transaction ends; call it inside that transaction."""
    numbers = {user_id: locks.person(agent_id, user_id) for user_id in senders}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n FROM unnest(%s::int[]) AS n WHERE NOT pg_try_advisory_xact_lock_shared(%s, n)",
            [sorted(set(numbers.values())), locks.ERASURE_RUN],
        )
        refused = {n for (n,) in cursor.fetchall()}
    for user_id, number in sorted(numbers.items()):
        if number in refused:
            raise Conflict(
                PERSON_BEING_ERASED,
                message
                or f"The person this {what} belongs to is being erased: nothing was stored (send it again once the "
                "erasure ended).",
                field=senders[user_id],
            )


def participants_erasing_refuse(*, agent_id: int, before: Any, after: Any, field: str) -> None:
    """Refuse a thread's metadata that adds to its participants list (`memoryUserIds`) a person
    being erased (step 5 of the module's docstring): her erasure takes her out of every list at one
    step, and a list written after that step would name her once it ended. The people the list held
    before are not asked (the erasure takes them out, or has). Holds their lock shared as
    `senders_erasing_refuse`; a write adding no one sends no query."""
    held = set(thread_participants(before))
    added = {person: field for person in thread_participants(after) if person and person not in held}
    if added:
        senders_erasing_refuse(
            agent_id=agent_id,
            senders=added,
            message="A person this participants list names is being erased: nothing was stored (send it again "
            "once the erasure ended, or without them).",
        )


@dataclass(frozen=True)
class ErasureMarked:
    """A person marked as being erased in one agent (what staff pages show): since when, in which
    mode, and whether a process is running the erasure now (else it was interrupted)."""

    agent_id: int
    user_id: str
    since: datetime
    mode: str
    running: bool
    mark_id: int  # its `ErasureMark` (a job names the mark by it, not by the person)


def erasures_marked(*, user_id: str | None = None, agent_ids: Sequence[int] | None = None) -> list[ErasureMarked]:
    """The people marked as being erased (of these agents, or this person), oldest mark first, each
    told running or interrupted by the lock its eraser holds (step 4 of the module's docstring)."""
    marked = ErasureMark.objects.all()
    if user_id is not None:
        marked = marked.filter(user_id=user_id)
    if agent_ids is not None:
        marked = marked.filter(agent_id__in=list(agent_ids))
    rows = list(marked.order_by("since", "pk").values_list("pk", "agent_id", "user_id", "since", "mode"))
    if not rows:
        return []
    with connection.cursor() as cursor:
        # Two-key advisory locks show in pg_locks as classid, objid with objsubid 2. The eraser's
        # is exclusive: a write of her message holds the same lock shared (`senders_erasing_refuse`).
        # pg_locks lists every database of the server: this one's only (a copy on the same server
        # erasing the same person holds the same numbers).
        cursor.execute(
            "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted"
            " AND mode = 'ExclusiveLock' AND classid = %s::oid"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [locks.ERASURE_RUN],
        )
        held = {number for (number,) in cursor.fetchall()}
    return [
        ErasureMarked(agent_id, person, since, mode or "erase", locks.person(agent_id, person) in held, pk)
        for pk, agent_id, person, since, mode in rows
    ]


def people_erasing(*, agent_id: int, people: Iterable[str]) -> dict[str, frozenset[str]]:
    """Of these registered people a write found in its rows: those being erased, each with the
    tables the erasure keeps (step 2 of the module's docstring). Holds the people's lock shared
    until the write's transaction ends; call it inside that transaction."""
    people = sorted(set(people))
    if not people:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_advisory_xact_lock_shared(%s, n)) FROM unnest(%s::int[]) AS n",
            [locks.ERASING, _lock_numbers(agent_id, people)],
        )
        # A statement of its own: its snapshot holds a mark committed while the lock was waited for.
        cursor.execute(
            "SELECT user_id, keeps FROM memoryapp_erasuremark WHERE agent_id = %s AND user_id = ANY(%s)",
            [agent_id, people],
        )
        return {user_id: frozenset(keeps or ()) for user_id, keeps in cursor.fetchall()}
