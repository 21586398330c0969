"""What happens after entries are written: the background work they start.

`entry_add` and friends call `after_entries_added` inside their transaction; the jobs are sent
only once it commits (transaction.on_commit), and each is idempotent, so a rollback sends
nothing and a repeat does nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction

from memoryapp.models import Entry, Thread

logger = logging.getLogger(__name__)


def after_entries_added(*, thread: Thread, entries: Sequence[Entry]) -> None:
    if not entries:
        return
    agent_id = thread.agent_id
    thread_pk = thread.pk

    def schedule() -> None:
        from memoryapp.extraction.schedule import extraction_schedule
        from memoryapp.search.indexing import embedding_schedule

        # The entries are committed: a broker that cannot take the job must not turn the write
        # into an error the client would retry (and duplicate). The next write, or `reembed`,
        # picks the entries up; the failure is logged for the operator.
        for send, kwargs in (
            (embedding_schedule, {"agent_id": agent_id}),
            (extraction_schedule, {"thread_pk": thread_pk}),
        ):
            try:
                send(**kwargs)
            except Exception:
                logger.exception("could not send %s after a write of thread %s", send.__name__, thread_pk)

    transaction.on_commit(schedule)
