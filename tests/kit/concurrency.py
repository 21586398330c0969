"""Work run in threads of their own, each with its own database connection (closed at its end)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections


def in_threads(*works: Callable[[], Any], timeout: float = 60) -> list[Any]:
    """Run each work in its own thread, all started together (a barrier); each one's answer, or the
    exception it raised, in the order given."""
    barrier = threading.Barrier(len(works))
    outcomes: list[Any] = [None] * len(works)

    def run(index: int, work: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            outcomes[index] = work()
        except BaseException as error:  # returned to the test: a thread's exception would vanish
            outcomes[index] = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(works)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return outcomes


def started(work: Callable[[], Any], errors: list[BaseException], *, name: str | None = None) -> threading.Thread:
    """Start `work` in a thread of its own now; what it raises goes to `errors`. Join it yourself."""

    def run() -> None:
        try:
            work()
        except BaseException as error:  # reported by the test: a thread's exception would vanish
            errors.append(error)
        finally:
            connections.close_all()

    runner = threading.Thread(target=run, name=name)
    runner.start()
    return runner
