"""Django's admin log (`django_admin_log`) without names: what staff did, to which row, never what
the row says.

Django writes `str(obj)` into each log entry's `object_repr`, and a model's text is made for the
page that shows it: "hold #2 on user p-ines", a fact's value, an item's name. The admin log is kept
outside every erasure's reach (it is Django's, and staff read it as history), so an entry made
before a person's erasure would name them after it. Every ModelAdmin of the service takes
`NamelessAdminLog`: an entry says the kind and number of the row ("legal hold #2"), who acted and
when, and Django's change message (the names of the fields changed, not their values).
tests/governance/test_admin_log_nameless.py checks every registered admin takes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.http import HttpRequest


def admin_log_repr(obj: models.Model) -> str:
    """What the admin log says a row is: its kind and number."""
    return f"{obj._meta.verbose_name} #{obj.pk}"[:200]


def _log(request: HttpRequest, objects: Iterable[models.Model], flag: int, message: Any) -> list[LogEntry]:
    text = json.dumps(message) if isinstance(message, list) else str(message or "")
    user_id = request.user.pk  # the admin logs only what a signed-in staff member did
    assert user_id is not None
    entries = [
        LogEntry(
            user_id=user_id,
            content_type_id=ContentType.objects.get_for_model(obj, for_concrete_model=False).pk,
            object_id=str(obj.pk),
            object_repr=admin_log_repr(obj),
            action_flag=flag,
            change_message=text,
        )
        for obj in objects
    ]
    if len(entries) == 1:
        entries[0].save()
        return entries
    return LogEntry.objects.bulk_create(entries)


class NamelessAdminLog:
    """A ModelAdmin mixin: its additions, changes and deletions are logged by kind and number."""

    def log_addition(self, request: HttpRequest, obj: models.Model, message: Any) -> LogEntry:
        return _log(request, [obj], ADDITION, message)[0]

    def log_change(self, request: HttpRequest, obj: models.Model, message: Any) -> LogEntry:
        return _log(request, [obj], CHANGE, message)[0]

    def log_deletions(self, request: HttpRequest, queryset: Iterable[models.Model]) -> list[LogEntry]:
        return _log(request, list(queryset), DELETION, "")
