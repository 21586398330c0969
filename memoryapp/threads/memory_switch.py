"""A thread's memory switch (001 `/memory on|off|status`): off, memory neither learns from nor speaks into it.

While a thread's memory is off:

- nothing is extracted from it: no extraction job is sent after its writes, a job asked for
  anyway is skipped with the reason, and the turns written while it was off stay out of every
  later extraction, also after it is turned on again (their seq ranges are kept in
  `Thread.extraction["memory_off"]`, which extraction reads);
- nothing is recalled into its contexts: no facts, observations, recalled turns or items, brief
  or file index (its own history is still its history, and its standing instructions, the
  context documents, still apply).

Explicit calls still work as asked: a search, the memory tool, the facts API.
"""

from __future__ import annotations

from django.db import transaction

from governance.audit.chain import audit_append
from memoryapp.models import Thread
from memoryapp.threads.off_ranges import OFF_RANGES_KEY, memory_off_ranges, seq_was_off
from memoryapp.threads.services import thread_lock, thread_sync

__all__ = ["OFF_RANGES_KEY", "memory_off_ranges", "seq_was_off", "thread_memory_set"]


@transaction.atomic
def thread_memory_set(*, thread: Thread, enabled: bool, actor: str = "") -> Thread:
    """Turn the thread's memory on or off (audited); setting it as it is changes nothing.

    Off opens a range at the thread's next seq; on closes it at the last seq given, so what was
    written in between is never extracted. Under the thread's lock, as writes hand out seqs.
    """
    locked = thread_lock(thread)
    if locked.memory_enabled == enabled:
        return locked
    progress = dict(locked.extraction) if isinstance(locked.extraction, dict) else {}
    ranges = memory_off_ranges(locked)
    if not enabled:
        ranges.append({"from_seq": locked.next_seq, "to_seq": None})
    elif ranges and ranges[-1].get("to_seq") is None:
        if int(ranges[-1]["from_seq"]) <= locked.next_seq - 1:
            ranges[-1]["to_seq"] = locked.next_seq - 1
        else:
            ranges.pop()  # nothing was written while it was off
    progress[OFF_RANGES_KEY] = ranges
    Thread.objects.filter(pk=locked.pk).update(memory_enabled=enabled, extraction=progress)
    locked.memory_enabled, locked.extraction = enabled, progress
    thread.memory_enabled, thread.extraction = enabled, progress
    thread_sync(thread, locked)
    audit_append(
        action="thread.memory_set",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        person=locked.user_id,
        subject=locked.external_id,
        outcome="on" if enabled else "off",
        details={"at_seq": locked.next_seq},
    )
    return locked
