"""A transaction that PostgreSQL chose as a deadlock victim (or failed to serialize) is run again.

Lock orders are kept so that the known writers cannot deadlock (cascades lock a thread before its
forks, rows in id order; the embedding job skips rows held by others). Whatever cycle is left, with
a writer not thought of, ends in PostgreSQL aborting one transaction: that one changed nothing, so
the service runs it again from the start, a few times with a short random pause, instead of
answering the client a 500. After the last try the client hears `busy` (503), still with nothing
changed.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import psycopg.errors
from django.db import OperationalError, connection, transaction

from memoryapp.errors import DomainError

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

ATTEMPTS = 4
_PAUSE_SECONDS = 0.05


class Busy(DomainError):
    status = 503

    def __init__(self) -> None:
        super().__init__(
            "busy", "Other requests held the same rows; nothing was changed. Try again in a moment.", field=None
        )


def is_lock_conflict(error: BaseException) -> bool:
    """A deadlock victim or a serialization failure: the transaction was rolled back whole."""
    cause = error.__cause__
    return isinstance(error, OperationalError) and isinstance(
        cause, (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
    )


def atomic_retrying(func: Callable[P, R]) -> Callable[P, R]:
    """`transaction.atomic`, run again (at most ATTEMPTS times) when it lost a lock conflict.

    Inside a caller's transaction nothing can be run again (what the caller did is aborted with
    it): there the function runs once in a savepoint and the error goes up to that caller.
    """

    @functools.wraps(func)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        if connection.in_atomic_block:
            with transaction.atomic():
                return func(*args, **kwargs)
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with transaction.atomic():
                    return func(*args, **kwargs)
            except OperationalError as error:
                if not is_lock_conflict(error):
                    raise
                logger.warning("%s lost a lock conflict (try %d of %d): %s", func.__name__, attempt, ATTEMPTS, error)
                if attempt == ATTEMPTS:
                    raise Busy() from error
                # Apart, so the two transactions that met do not meet again in step.
                time.sleep(random.uniform(0.5, 1.5) * _PAUSE_SECONDS * attempt)
        raise AssertionError("unreachable")

    return run
