"""`manage.py check --database default` (and migrate's checks) report a refused start as an error."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error
from django.db import DatabaseError

from governance.crypto.startup import encryption_refusal


def encryption_keys_check(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not databases or "default" not in databases:
        return []
    try:
        reason = encryption_refusal()
    except DatabaseError:
        return []  # no database to compare with yet: the database checks report that
    return [Error(reason, id="governance.E101")] if reason else []
