"""This process's writer of the audit anchor file (governance.audit.chain `anchor_append`): each
line is written at once, on the committing thread, and made durable (fsync) later, at most
`AUDIT_ANCHOR_SYNC_SECONDS` after it was written, by a thread of the process's own, and when the
process ends.

Why: an fsync after every audited commit was the largest part of an audit record's cost to the
write that made it (bench/screening.py), paid on the request's thread. Now a write pays one
`write` with O_APPEND (and a stat of the path, the file's size and its last byte: a few
microseconds) on a file kept open, and one fsync covers every line of the last interval.

What a crash may lose, and what it cannot:

1. The process killed (SIGKILL, out of memory, a crash of Python) after a line was written: nothing.
   The line was handed to the kernel (`write` returned) before the committing request went on, and
   the kernel writes it to disk whatever becomes of the process.
2. The machine going down (power, a kernel panic): the lines written in the last
   `AUDIT_ANCHOR_SYNC_SECONDS` before it, those not yet fsynced. A process that ends syncs what it
   wrote first (atexit; a Celery pool process at its shutdown signal, memory_project.celery).
3. A crash between a record's commit and its line (as before): that record is unanchored.

An unanchored record verifies as a plain chain link does, and the next anchored record covers it
(its hash chains through it). `AUDIT_ANCHOR_SYNC_SECONDS=0` fsyncs each line on the committing
thread before it goes on, as every line was before.

The file is kept open between lines, and opened again when its path changes (settings) or no
longer names the file kept open (moved aside, deleted): its inode is compared on each line. A
child process made by fork starts without the parent's file, lines or thread.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from pathlib import Path

logger = logging.getLogger(__name__)


class AnchorFileWriter:
    """One per process (`_writer`): the file kept open, whether lines written to it wait for their
    fsync and since when, and the thread that makes them durable."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.path: str | None = None
        self.fd: int | None = None
        self.inode: tuple[int, int] | None = None
        # When the oldest line not yet fsynced was written (time.monotonic), None when there is none.
        self.unsynced_since: float | None = None
        self.sync_seconds = 0.0
        self.syncer: threading.Thread | None = None

    def append(self, path: Path, line: bytes, *, sync_seconds: float) -> None:
        """Append one line (O_APPEND: the lines of concurrent processes do not interleave); fsync
        it now when `sync_seconds` is 0, else within `sync_seconds`. Raises OSError."""
        with self.lock:
            fd = self._open(str(path))
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # end a line torn by a crash, so this one reads whole
                if os.write(fd, line) != len(line):
                    raise OSError(f"short write of an audit anchor to {path}")
                if sync_seconds <= 0:
                    os.fsync(fd)  # with the lines before it that were waiting
                    self.unsynced_since = None
                    return
            except OSError:
                self._close()
                raise
            self.sync_seconds = sync_seconds
            if self.unsynced_since is None:
                self.unsynced_since = time.monotonic()
                self._syncer_started()
                self.wake.notify()

    def sync(self) -> None:
        """fsync now what this process wrote and has not synced (at exit; tests)."""
        with self.lock:
            if self.fd is not None and self.unsynced_since is not None:
                self.unsynced_since = None
                try:
                    os.fsync(self.fd)
                except OSError:
                    logger.exception("could not sync the audit anchors in %s", self.path)

    def pending(self) -> bool:
        """Whether lines this process wrote wait for their fsync."""
        with self.lock:
            return self.unsynced_since is not None

    def _open(self, path: str) -> int:
        """The descriptor of the file at `path` (lock held): the one kept open while the path
        still names its file, else the file opened (made, with its directory's entry synced)."""
        if self.fd is not None and self.path == path:
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                stat = None
            if stat is not None and (stat.st_dev, stat.st_ino) == self.inode:
                return self.fd
        self._close()
        fresh = not os.path.exists(path)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            if fresh:  # the new file's name must survive a crash too
                directory = os.open(Path(path).parent, os.O_RDONLY)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
            stat = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        self.path, self.fd, self.inode = path, fd, (stat.st_dev, stat.st_ino)
        return fd

    def _close(self) -> None:
        """Sync and close the file kept open (lock held): its path changed or names another file."""
        fd, self.fd, self.path, self.inode = self.fd, None, None, None
        if fd is None:
            return
        try:
            if self.unsynced_since is not None:
                os.fsync(fd)
        except OSError:
            logger.exception("could not sync the audit anchors before closing them")
        finally:
            self.unsynced_since = None
            os.close(fd)

    def _syncer_started(self) -> None:
        if self.syncer is None or not self.syncer.is_alive():
            self.syncer = threading.Thread(target=self._sync_loop, name="audit-anchor-sync", daemon=True)
            self.syncer.start()

    def _sync_loop(self) -> None:
        """Wait for a line to sync, then until `sync_seconds` after it was written, then fsync
        (a duplicate of the descriptor, outside the lock: a commit meanwhile does not wait for it)."""
        while True:
            with self.lock:
                while self.unsynced_since is None or self.fd is None:
                    self.wake.wait()
                due = self.unsynced_since + self.sync_seconds
                now = time.monotonic()
                if now < due:
                    self.wake.wait(due - now)
                    continue
                self.unsynced_since = None  # lines written from now on wait for the next fsync
                try:
                    fd = os.dup(self.fd)
                except OSError:
                    logger.exception("could not sync the audit anchors in %s", self.path)
                    continue
            try:
                os.fsync(fd)
            except OSError:
                logger.exception("could not sync the audit anchors")
            finally:
                os.close(fd)


_writer = AnchorFileWriter()


def anchor_line_append(path: Path, line: bytes, *, sync_seconds: float) -> None:
    """Append one line to the anchor file at `path` (see the module's docstring). Raises OSError."""
    _writer.append(path, line, sync_seconds=sync_seconds)


def anchors_sync() -> None:
    """Make every anchor line this process wrote durable now."""
    _writer.sync()


def anchors_sync_pending() -> bool:
    """Whether anchor lines this process wrote wait for their fsync."""
    return _writer.pending()


def _after_fork_in_child() -> None:
    """A child made by fork has the parent's writer without its thread, maybe with its lock held by
    another of the parent's threads: it starts with a writer of its own (the parent syncs its lines)."""
    global _writer
    inherited, _writer = _writer.fd, AnchorFileWriter()
    if inherited is not None:
        with contextlib.suppress(OSError):
            os.close(inherited)


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(anchors_sync)
