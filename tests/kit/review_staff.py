"""Helpers of the review tests: staff in their role groups, a short conversation, suggestions in it."""

from __future__ import annotations

from django.contrib.auth.models import Group, User
from django.test import Client

from memoryapp.items.services import item_write
from memoryapp.models import Agent, Entry, MemoryItem, Thread
from memoryapp.threads.services import entry_add, thread_create

REVIEW_URL = "/admin/memoryapp/memoryitem/review/"
ROLE_GROUPS = {"reviewer": "Reviewers", "privacy": "Privacy officers", "operator": "Operators"}


def staff(role: str | None = None, *, name: str = "", superuser: bool = False) -> Client:
    """A logged-in staff user in one role's group (the groups migrate keeps), or a superuser."""
    user = User.objects.create_user(name or f"{role or 'staff'}-user", is_staff=True, is_superuser=superuser)
    if role:
        user.groups.set(Group.objects.filter(name=ROLE_GROUPS[role]))
    client = Client()
    client.force_login(user)
    return client


def food_talk(agent: Agent, *, external_id: str = "t-ana", user_id: str = "u-ana") -> tuple[Thread, Entry]:
    """Three turns about Ana's diet; returns the thread and her answer (the turn quoted)."""
    thread = thread_create(agent=agent, external_id=external_id, user_id=user_id)
    entry_add(thread=thread, role="assistant", content="Anything I should know about your food?")
    answer = entry_add(thread=thread, role="user", content="I stopped eating meat, I am vegetarian now.")
    entry_add(thread=thread, role="assistant", content="Noted, vegetarian recipes from now on.")
    return thread, answer


def suggest(
    agent: Agent,
    entry: Entry | None,
    *,
    value: str = "vegetarian",
    attribute: str = "diet",
    subject: str = "Ana",
    user_id: str = "u-ana",
    quote: str = "I am vegetarian now",
    trust: str = "model",
    thread_id: str = "",
) -> MemoryItem:
    return item_write(
        agent=agent,
        kind="preference",
        subject=subject,
        attribute=attribute,
        value=value,
        trust=trust,
        user_id=user_id,
        thread_id=thread_id,
        evidence=[{"entry_id": entry.id, "quote": quote}] if entry is not None else [],
    )
