"""Scheduling of extraction after new entries (owned by the extraction area)."""

from __future__ import annotations


def extraction_schedule(*, thread_pk: int) -> None:
    """Send (debounced) the extraction job of a thread after new entries. Contract: cheap, idempotent."""
    return None  # placeholder until the extraction area lands its job
