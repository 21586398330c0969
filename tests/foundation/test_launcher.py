"""`make run`'s supervision: a child that exits is started again with a backoff; a stop ends every child.

Real child processes (tiny Python commands), no Django needed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from memory_project.launcher import Backoff, supervise
from tests.kit.faults import wait_for

ROOT = Path(__file__).resolve().parents[2]


def _crashing(starts: Path, *, after: float = 0.0) -> list[str]:
    """A command that notes its start in `starts`, then exits with status 3 after `after` seconds."""
    code = f"import time\nopen({str(starts)!r}, 'a').write('x')\ntime.sleep({after})\nraise SystemExit(3)"
    return [sys.executable, "-c", code]


STEADY = [sys.executable, "-c", "import time; time.sleep(600)"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pid_of(lines: list[str], name: str) -> int:
    started = [int(m.group(1)) for line in lines if (m := re.search(rf"{name} started \(pid (\d+)\)", line))]
    assert started, lines
    return started[-1]


def _delays(lines: list[str], name: str) -> list[float]:
    pattern = rf"{name} exited with 3 after [\d.]+s; restarting it in ([\d.]+)s"
    return [float(m.group(1)) for line in lines if (m := re.search(pattern, line))]


def test_a_child_that_keeps_exiting_is_restarted_with_a_doubling_delay_and_the_others_keep_running(
    tmp_path: Path,
) -> None:
    starts = tmp_path / "starts"
    lines: list[str] = []
    stop = threading.Event()
    supervisor = threading.Thread(
        target=supervise,
        args=({"worker": _crashing(starts), "web": STEADY},),
        kwargs={"stop": stop, "backoff": Backoff(first=0.05, longest=0.2, stable_after=60), "say": lines.append},
    )
    supervisor.start()
    try:
        wait_for("five starts of the crashing child", lambda: starts.exists() and len(starts.read_text()) >= 5)
        web = _pid_of(lines, "web")
    finally:
        stop.set()
        supervisor.join(timeout=60)
    assert not supervisor.is_alive()
    assert _delays(lines, "worker")[:4] == [0.05, 0.1, 0.2, 0.2]
    assert not any(line.strip().startswith("web exited") for line in lines)  # started once, never restarted
    assert sum("web started" in line for line in lines) == 1
    assert not _alive(web)  # the stop ended it


def test_a_child_that_stayed_up_a_while_is_restarted_after_the_first_delay(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    lines: list[str] = []
    stop = threading.Event()
    supervisor = threading.Thread(
        target=supervise,
        args=({"beat": _crashing(starts, after=0.3)},),
        kwargs={"stop": stop, "backoff": Backoff(first=0.05, longest=5, stable_after=0.2), "say": lines.append},
    )
    supervisor.start()
    try:
        wait_for("three starts", lambda: starts.exists() and len(starts.read_text()) >= 3)
    finally:
        stop.set()
        supervisor.join(timeout=60)
    delays = _delays(lines, "beat")
    assert len(delays) >= 2 and set(delays) == {0.05}


def test_sigterm_to_the_launcher_stops_every_child_and_restarts_none() -> None:
    """As `make run` is stopped (Ctrl-C, SIGTERM): the supervising process ends, with its children."""
    script = (
        "import sys\n"
        "from memory_project.launcher import Backoff, stop_on_signals, supervise\n"
        f"supervise({{'web': {STEADY!r}, 'worker': {STEADY!r}}}, stop=stop_on_signals(), backoff=Backoff(first=0.05))\n"
        "print('  supervise returned', flush=True)\n"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert launcher.stdout is not None
    lines = [launcher.stdout.readline(), launcher.stdout.readline()]
    pids = [_pid_of(lines, "web"), _pid_of(lines, "worker")]
    launcher.send_signal(signal.SIGTERM)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 0 and "supervise returned" in out
    assert "restarting" not in out
    wait_for("the children to be gone", lambda: not any(_alive(pid) for pid in pids), timeout=30)
