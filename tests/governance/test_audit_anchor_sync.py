"""The audit anchor file's lines are written at each commit and fsynced once an interval
(governance.audit.anchor_file): what a burst of commits leaves, what a killed process leaves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from governance.audit import anchor_file
from governance.audit.anchor_file import anchor_line_append, anchors_sync, anchors_sync_pending
from governance.audit.chain import audit_append, audit_verify
from governance.models import AuditRecord
from tests.kit import PROJECT_ROOT
from tests.kit.servers import database_url


def _anchor_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _anchored_as_committed(path: Path) -> bool:
    """Every line names a committed record by its own hash (none a seq that was rolled back)."""
    hashes = dict(AuditRecord.objects.values_list("seq", "hash"))
    return all(hashes.get(line["seq"]) == line["hash"] for line in _anchor_lines(path))


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The descriptors fsynced from now on in this process (the fsyncs still happen)."""
    synced: list[int] = []
    real: Callable[[int], None] = os.fsync

    def spy(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_commits_writes_every_line_at_once_and_one_fsync_makes_them_durable(
    audit_anchor_file: Path, settings: Any, request: pytest.FixtureRequest
) -> None:
    settings.AUDIT_ANCHOR_SYNC_SECONDS = 3600  # the writer's thread does not sync within the test
    audit_append(action="first")  # the file made (its directory's entry synced)
    synced: list[int] = request.getfixturevalue("fsyncs")
    for n in range(10):
        audit_append(action="burst", subject=str(n))  # each its own commit
        if n == 4:
            with pytest.raises(RuntimeError), transaction.atomic():
                audit_append(action="lost")  # seq 7, rolled back; the next commit takes seq 7
                raise RuntimeError
    # Every commit's line is in the file already, the newest seq among them; none was fsynced yet.
    assert [line["seq"] for line in _anchor_lines(audit_anchor_file)] == list(range(1, 12))
    assert _anchored_as_committed(audit_anchor_file)
    assert synced == [] and anchors_sync_pending()
    anchors_sync()  # as the process's exit does
    assert len(synced) == 1 and not anchors_sync_pending()
    assert audit_verify().as_dict() == {"records": 11, "ok": True, "first_broken": None, "anchors": 11, "reason": ""}


@pytest.mark.django_db(transaction=True)
def test_with_no_interval_each_commit_is_fsynced_before_it_returns(
    audit_anchor_file: Path, settings: Any, request: pytest.FixtureRequest
) -> None:
    settings.AUDIT_ANCHOR_SYNC_SECONDS = 0
    audit_append(action="first")
    synced: list[int] = request.getfixturevalue("fsyncs")
    for n in range(4):
        audit_append(action="each", subject=str(n))
        assert len(synced) == n + 1 and not anchors_sync_pending()
    assert audit_verify().anchors == 5


@pytest.mark.django_db(transaction=True)
def test_the_writers_thread_fsyncs_the_lines_of_an_interval_without_another_commit(
    audit_anchor_file: Path, settings: Any, fsyncs: list[int]
) -> None:
    settings.AUDIT_ANCHOR_SYNC_SECONDS = 0.05
    for n in range(3):
        audit_append(action="quiet", subject=str(n))
    deadline = time.monotonic() + 30
    while anchors_sync_pending() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not anchors_sync_pending()
    assert fsyncs  # by the writer's thread: no commit came after the last line
    assert [line["seq"] for line in _anchor_lines(audit_anchor_file)] == [1, 2, 3]


@pytest.mark.django_db(transaction=True)
def test_a_process_killed_before_its_fsync_loses_no_line_it_wrote(audit_anchor_file: Path) -> None:
    # The lines wait for their fsync (a minute), and the process is killed before any: the kernel
    # holds what it wrote. (Only the machine going down loses the lines of the interval.)
    code = (
        "import os, signal\n"
        "from governance.audit.chain import audit_append\n"
        "from governance.audit.anchor_file import anchors_sync_pending\n"
        "for n in range(5): audit_append(action='before the kill', subject=str(n))\n"
        "assert anchors_sync_pending()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "AUDIT_ANCHOR_FILE": str(audit_anchor_file),
        "AUDIT_ANCHOR_SYNC_SECONDS": "60",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert AuditRecord.objects.count() == 5
    assert [line["seq"] for line in _anchor_lines(audit_anchor_file)] == [1, 2, 3, 4, 5]
    assert _anchored_as_committed(audit_anchor_file)
    assert audit_verify().as_dict() == {"records": 5, "ok": True, "first_broken": None, "anchors": 5, "reason": ""}


def test_a_forked_child_writes_with_a_writer_of_its_own(tmp_path: Path) -> None:
    """A child forked while another thread of the parent holds the writer (its thread syncing, a
    commit writing) neither waits for that thread, which it does not have, nor syncs the parent's lines."""
    path = tmp_path / "anchors.log"
    anchor_line_append(path, b'{"seq": 1}\n', sync_seconds=3600)
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with anchor_file._writer.lock:
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(30)
    pid = os.fork()
    if pid == 0:  # the child: no test machinery, an exit code says what it found
        try:
            fresh = not anchors_sync_pending()
            anchor_line_append(path, b'{"seq": 2}\n', sync_seconds=3600)
            anchors_sync()
            os._exit(0 if fresh and not anchors_sync_pending() else 1)
        except BaseException:
            os._exit(2)
    release.set()
    thread.join()
    deadline = time.monotonic() + 60
    while (waited := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.02)
    if waited == (0, 0):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert waited[0] == pid and os.waitstatus_to_exitcode(waited[1]) == 0
    assert path.read_text().splitlines() == ['{"seq": 1}', '{"seq": 2}']
    assert anchors_sync_pending()  # the parent's own line still waits for the parent's fsync
    anchors_sync()
