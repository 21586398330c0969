from __future__ import annotations

from django.db import models

from memoryapp.ids import new_id
from memoryapp.models.agents import Agent
from memoryapp.models.threads import Thread


def new_session_id() -> str:
    return new_id("ses")


class ChannelSession(models.Model):
    """A channel conversation (004 `SessionManager`): a person talking to an agent on one channel
    (a Telegram chat, a Slack thread, a web widget ...) mapped onto one thread.

    The key is (agent, user_id, channel_type, channel_id). At most one session of a key is
    active (`channel_session_one_active`): the database, not a lock in a process, keeps two
    concurrent get-or-creates from making two threads. A closed session keeps its thread; the
    next get-or-create of its key opens a new session on a new thread.
    """

    class Status(models.TextChoices):
        ACTIVE = "active"
        CLOSED = "closed"

    id = models.CharField(max_length=40, primary_key=True, default=new_session_id, editable=False)
    # Indexed by channel_session_agent_idx, which leads with it.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    # The thread goes, the session goes with it (a thread's delete, a person's erasure).
    thread = models.OneToOneField(Thread, on_delete=models.CASCADE, related_name="channel_session")
    user_id = models.CharField(max_length=128)
    channel_type = models.CharField(max_length=64)
    channel_id = models.CharField(max_length=255)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "user_id", "channel_type", "channel_id"],
                condition=models.Q(status="active"),
                name="channel_session_one_active",
            ),
        ]
        indexes = [
            # sessions_list: an agent's sessions newest first, keyset paging on (created_at, id).
            models.Index(fields=["agent", "-created_at", "-id"], name="channel_session_agent_idx"),
            # sessions_list(user_id=...), a person's erasure and export.
            models.Index(fields=["agent", "user_id", "-created_at"], name="channel_session_user_idx"),
        ]

    def __str__(self) -> str:
        return self.id
