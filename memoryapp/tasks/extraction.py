"""Celery tasks of this area."""
