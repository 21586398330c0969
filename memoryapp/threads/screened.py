"""Entries through screening (memoryapp.screening) before they are stored: what the agent's policy
redacts is replaced in the content, tool calls, event, metadata and sender name, the entry's text
and hash made again from what stays, and an entry holding what is to be held is marked held."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from governance.audit.chain import audit_append
from memoryapp.models import Entry, Thread
from memoryapp.screening.screen import Screener, screener_for
from memoryapp.threads.hashing import entry_hash
from memoryapp.threads.hooks import after_vectors_cleared
from memoryapp.threads.validation import entry_text


def thread_screener(thread: Thread) -> Screener | None:
    """The screener of a write into this thread (the agent read with it is used when it was)."""
    if Thread.agent.is_cached(thread):
        return screener_for(agent=thread.agent)
    return screener_for(agent_id=thread.agent_id)


def entry_texts_refresh(entry: Entry) -> list[str]:
    """An entry's text and hash made again from its content and tool calls (after a redaction:
    memoryapp.subjects.erasing); answers the fields they are."""
    entry.text = entry_text(content=entry.content, tool_calls=entry.tool_calls)
    entry.content_hash = entry_hash(entry)
    return ["text", "content_hash"]


def entries_screened(*, entries: Sequence[Entry], screener: Screener, prefixes: Sequence[str], now: datetime) -> None:
    """Screen the entries in place (see the module's docstring); raises SensitiveDataRefused for a
    refused category, naming the field (`entries[3].content`)."""
    # The batch's ordinary turns told apart at once: a turn whose content the screener would give
    # back unread and that has no other text to screen is left as it is, unvisited.
    clear = screener.texts_clear([entry.content for entry in entries])
    for entry, prefix, quiet in zip(entries, prefixes, clear, strict=True):
        if quiet and not (entry.tool_calls or entry.event or entry.metadata or entry.sender_name):
            continue
        content = screener.value(entry.content, field=f"{prefix}content")
        # Most turns have no tool calls, event, metadata or sender name: nothing to screen, and no
        # field name to make for it.
        tool_calls = (
            screener.value(entry.tool_calls, field=f"{prefix}tool_calls") if entry.tool_calls else entry.tool_calls
        )
        event = screener.value(entry.event, field=f"{prefix}event") if entry.event else entry.event
        if entry.metadata:
            entry.metadata = screener.value(entry.metadata, field=f"{prefix}metadata")
        if entry.sender_name:
            entry.sender_name = screener.text(entry.sender_name, field=f"{prefix}sender_name")
        if content != entry.content or tool_calls != entry.tool_calls or event != entry.event:
            entry.content, entry.tool_calls, entry.event = content, tool_calls, event
            entry_texts_refresh(entry)
        if screener.take_held():
            entry.held_at = now


@transaction.atomic
def entry_hold_release(*, entry: Entry, actor: str) -> bool:
    """A reviewer releases an entry screening held: it joins search and context, and is embedded
    (once this commits). False when it was not held (released already, or never). Audited.

    Extraction's mark has moved past it meanwhile: a released turn is not extracted again (a
    reviewer who wants memory from it writes the item)."""
    released = Entry.objects.filter(pk=entry.pk, held_at__isnull=False).update(held_at=None)
    if not released:
        return False
    entry.held_at = None
    audit_append(
        action="screening.released",
        actor=actor,
        agent_id=entry.agent_id,
        thread_id=entry.thread.external_id,
        person=entry.thread.user_id,
        subject=entry.pk,
        outcome="released",
    )
    after_vectors_cleared(agent_id=entry.agent_id)
    return True
