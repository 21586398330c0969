"""Writes of channel sessions: get-or-create (`session_open`), close and reopen.

`session_open` under concurrency (two webhooks of one chat arriving together, two web processes):

1. One transaction. A transaction-scoped advisory lock on the session's key (a hash of agent, person,
   channel type and channel id) queues the openers of one key; openers of other keys never wait.
2. Under it, the active session of the key is read: there is one, it is answered (`created` False).
3. Otherwise a thread (for the person, a generated id: the agent's compaction settings apply, as to
   every thread with none of its own) and the session are inserted together.
4. The partial unique constraint (`channel_session_one_active`) is what guarantees one active
   session per key whatever the path in: an insert that loses to another (a caller that skipped the
   lock) rolls its savepoint back, thread and all, and answers the winner's session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from governance import locks
from governance.audit.chain import audit_append
from memoryapp.errors import Conflict, DomainError, NotFound
from memoryapp.ids import person_id_check
from memoryapp.models import Agent, ChannelSession
from memoryapp.threads.services import thread_create

# A channel type names the kind of channel (telegram, slack, web, whatsapp ...): a short word.
CHANNEL_TYPE_SHAPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
MAX_CHANNEL_ID = 255


@dataclass(frozen=True)
class SessionOpened:
    session: ChannelSession
    created: bool


def channel_type_check(value: object, *, field: str = "channel_type") -> str:
    if not isinstance(value, str):
        raise DomainError("invalid_type", f"{field} must be a string.", field=field)
    if not CHANNEL_TYPE_SHAPE.fullmatch(value):
        raise DomainError(
            "invalid_value",
            f"{field} must be 1 to 64 letters, digits or _ . : - (starting with a letter or digit).",
            field=field,
        )
    return value


def channel_id_check(value: object, *, field: str = "channel_id") -> str:
    if not isinstance(value, str):
        raise DomainError("invalid_type", f"{field} must be a string.", field=field)
    if not value:
        raise DomainError("required", f"{field} must not be empty.", field=field)
    if len(value) > MAX_CHANNEL_ID:
        raise DomainError("too_long", f"{field} is longer than {MAX_CHANNEL_ID} characters.", field=field)
    if not value.isprintable() or value.strip() != value:
        raise DomainError("invalid_value", f"{field} must be printable, with no space at either end.", field=field)
    return value


def session_user_check(value: object, *, field: str = "user_id") -> str:
    user_id = person_id_check(value, field=field)
    if not user_id:
        raise DomainError("required", f"{field} must name the person of the channel.", field=field)
    return user_id


def _key_lock(agent: Agent, user_id: str, channel_type: str, channel_id: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s)",
            [locks.channel_session(str(agent.pk), user_id, channel_type, channel_id)],
        )


def _active(agent: Agent, user_id: str, channel_type: str, channel_id: str) -> ChannelSession | None:
    return (
        ChannelSession.objects.select_related("thread")
        .filter(
            agent=agent,
            user_id=user_id,
            channel_type=channel_type,
            channel_id=channel_id,
            status=ChannelSession.Status.ACTIVE,
        )
        .first()
    )


def _audit(session: ChannelSession, *, outcome: str, actor: str) -> None:
    audit_append(
        action="session." + outcome,
        actor=actor,
        agent_id=session.agent_id,
        thread_id=session.thread.external_id,
        subject=session.id,
        outcome=outcome,
        details={"channel_type": session.channel_type},
        person=session.user_id,
    )


@transaction.atomic
def session_open(*, agent: Agent, user_id: str, channel_type: str, channel_id: str, actor: str = "") -> SessionOpened:
    """The active session of the channel conversation, made (with its thread) when there is none;
    see the module's docstring for why two concurrent calls make one."""
    user_id = session_user_check(user_id)
    channel_type = channel_type_check(channel_type)
    channel_id = channel_id_check(channel_id)
    _key_lock(agent, user_id, channel_type, channel_id)
    found = _active(agent, user_id, channel_type, channel_id)
    if found is not None:
        return SessionOpened(session=found, created=False)
    try:
        with transaction.atomic():
            thread = thread_create(agent=agent, user_id=user_id, actor=actor)
            session = ChannelSession.objects.create(
                agent=agent, thread=thread, user_id=user_id, channel_type=channel_type, channel_id=channel_id
            )
            _audit(session, outcome="opened", actor=actor)
    except IntegrityError:
        found = _active(agent, user_id, channel_type, channel_id)
        if found is None:
            raise
        return SessionOpened(session=found, created=False)
    return SessionOpened(session=session, created=True)


def _locked(agent: Agent, session_id: str) -> ChannelSession:
    session = (
        ChannelSession.objects.select_for_update(of=("self",))
        .select_related("thread")
        .filter(agent=agent, pk=session_id)
        .first()
    )
    if session is None:
        raise NotFound("Session")
    return session


@transaction.atomic
def session_close(*, agent: Agent, session_id: str, actor: str = "") -> ChannelSession:
    """Close the session (again: answered as it is). Its thread stays; the next get-or-create of
    its channel opens a new session on a new thread."""
    session = _locked(agent, session_id)
    if session.status == ChannelSession.Status.CLOSED:
        return session
    session.status, session.closed_at = ChannelSession.Status.CLOSED, timezone.now()
    session.save(update_fields=["status", "closed_at", "updated_at"])
    _audit(session, outcome="closed", actor=actor)
    return session


@transaction.atomic
def session_reopen(*, agent: Agent, session_id: str, actor: str = "") -> ChannelSession:
    """Make a closed session the active one of its channel again (an active one: answered as it is);
    409 `session_active` when another session of the channel is active meanwhile."""
    session = _locked(agent, session_id)
    if session.status == ChannelSession.Status.ACTIVE:
        return session
    _key_lock(agent, session.user_id, session.channel_type, session.channel_id)
    other = _active(agent, session.user_id, session.channel_type, session.channel_id)
    if other is not None:
        raise Conflict(
            "session_active",
            f"Session {other.id} is the active session of this channel; close it before reopening {session.id}.",
        )
    session.status, session.closed_at = ChannelSession.Status.ACTIVE, None
    session.save(update_fields=["status", "closed_at", "updated_at"])
    _audit(session, outcome="reopened", actor=actor)
    return session


def sessions_of_person_delete(*, agent_id: int, user_id: str) -> int:
    """Delete the person's sessions of one agent (their erasure): the channel ids that named them.
    The threads are the erasure's to delete (or redact); the rows here go either way."""
    deleted, _ = ChannelSession.objects.filter(agent_id=agent_id, user_id=user_id).delete()
    return deleted
