"""Thin Celery tasks, one module per area; each takes ids, loads rows and calls one service."""

from memoryapp.tasks import access, compaction, consolidation, embedding, events, extraction, items, subjects  # noqa: F401
