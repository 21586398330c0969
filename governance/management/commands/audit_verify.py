from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError

from governance.audit.chain import audit_verify
from memory_project.commands import ProjectCommand


class Command(ProjectCommand):
    help = (
        "Check the audit trail's hash chain and its anchors (AUDIT_ANCHOR_FILE): records checked, ok, "
        "the first broken seq and why."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        result = audit_verify()
        self.stdout.write(json.dumps(result.as_dict()))
        if not result.ok:
            raise CommandError(f"audit chain broken at seq {result.first_broken}: {result.reason}")
