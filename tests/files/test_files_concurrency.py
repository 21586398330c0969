"""Writers at the same time on one agent's files: one wins, the other hears of it, nothing is lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.protocol import file_create, file_str_replace
from memoryapp.files.selectors import file_history
from memoryapp.files.services import file_put
from memoryapp.models import MemoryFileVersion
from tests.kit.api import Caller
from tests.kit.concurrency import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_writers_from_the_same_read_one_wins_the_other_is_told_to_view_again(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent)
    read = file_put(access=access, path="/memories/plan.md", text="Go to Rome.\n")

    def edit(city: str) -> Callable[[], Any]:
        return lambda: file_str_replace(
            access=access, path="/memories/plan.md", old_str="Rome", new_str=city, expected_sha256=read.sha256
        )

    outcomes = in_threads(edit("Lisbon"), edit("Porto"))
    won = [o for o in outcomes if not isinstance(o, Exception)]
    lost = [o for o in outcomes if isinstance(o, Exception)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert isinstance(lost[0], MemoryFileError) and lost[0].code == "file_changed"
    assert lost[0].message == "Error: /memories/plan.md changed since you last read it. View it again and try again."
    history = file_history(access=access, path="/memories/plan.md")
    assert [v.sequence for v in history] == [1, 2]
    assert history[1].previous_id == history[0].pk
    assert history[1].sha256 == won[0].details["sha256"]


def test_two_writers_without_a_read_sha256_both_land_and_no_update_is_lost(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent)
    file_put(access=access, path="/memories/plan.md", text="a\nb\n")
    outcomes = in_threads(
        lambda: file_str_replace(access=access, path="/memories/plan.md", old_str="a", new_str="A"),
        lambda: file_str_replace(access=access, path="/memories/plan.md", old_str="b", new_str="B"),
    )
    assert not any(isinstance(o, Exception) for o in outcomes), outcomes
    history = file_history(access=access, path="/memories/plan.md")
    assert [v.sequence for v in history] == [1, 2, 3]
    assert history[-1].content == "A\nB\n"
    assert history[2].previous_id == history[1].pk


def test_a_file_and_a_file_under_it_at_once_only_one_stands(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent)
    outcomes = in_threads(
        lambda: file_create(access=access, path="/memories/a", file_text="file"),
        lambda: file_create(access=access, path="/memories/a/b.md", file_text="under"),
    )
    errors = [o for o in outcomes if isinstance(o, MemoryFileError)]
    assert len(errors) == 1 and errors[0].code in ("is_directory", "parent_is_file")
    assert MemoryFileVersion.objects.count() == 1


def _wait_for_a_blocked_backend(timeout: float = 20.0) -> None:
    """Until another connection waits on a row lock (the writer's insert behind the rogue's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)
    raise AssertionError("the writer never waited on the rogue's version")


@pytest.mark.parametrize("with_read_sha", [True, False])
def test_a_writer_that_loses_the_version_number_makes_its_change_again_on_what_stands(
    alice: Caller, with_read_sha: bool
) -> None:
    """A rogue writer (no lock, like an older process) holds version 2 uncommitted while ours inserts it.

    Ours blocks on the unique (scope, path, sequence) index, fails when the rogue commits, and
    makes the change again on what stands: as changed, when it was made from a read sha256.
    """
    access = FileAccess(agent=alice.agent)
    first = file_put(access=access, path="/memories/plan.md", text="Rome and Paris\n")
    rogue_may_commit = threading.Event()
    rogue_inserted = threading.Event()

    def rogue() -> None:
        with transaction.atomic():
            MemoryFileVersion.objects.create(
                agent=alice.agent,
                path="/memories/plan.md",
                sequence=2,
                content="Rome and Berlin\n",
                sha256="f" * 64,
                size=16,
                previous=first,
            )
            rogue_inserted.set()
            rogue_may_commit.wait(timeout=30)

    def ours() -> Any:
        rogue_inserted.wait(timeout=30)
        expected = first.sha256 if with_read_sha else None
        kwargs: dict[str, Any] = {"expected_sha256": expected} if expected else {}
        return file_str_replace(access=access, path="/memories/plan.md", old_str="Rome", new_str="Lisbon", **kwargs)

    def coordinator() -> None:
        _wait_for_a_blocked_backend()
        rogue_may_commit.set()

    outcomes = in_threads(rogue, ours, coordinator)
    answer = outcomes[1]
    history = file_history(access=access, path="/memories/plan.md")
    if with_read_sha:
        assert isinstance(answer, MemoryFileError) and answer.code == "file_changed", answer
        assert [v.content for v in history] == ["Rome and Paris\n", "Rome and Berlin\n"]
    else:
        assert not isinstance(answer, Exception), answer
        assert [v.content for v in history] == ["Rome and Paris\n", "Rome and Berlin\n", "Lisbon and Berlin\n"]
        assert history[2].previous_id == history[1].pk
