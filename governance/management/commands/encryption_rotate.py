from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from governance.jobs.broker import job_enqueue
from governance.models import JobRun
from governance.tasks import encryption_rotate_job
from memory_project.commands import ProjectCommand


class Command(ProjectCommand):
    help = (
        "Rewrap every data key under the first key of MEMORY_ENCRYPTION_KEYS and seal every row under its owner's "
        "key (also: encrypt a database written with encryption off). After it, the other keys can be removed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch", type=int, default=500, help="rows per transaction (default 500)")
        parser.add_argument(
            "--rekey",
            action="store_true",
            help="also give every owner a new data key and seal every row again under it (old data keys destroyed)",
        )
        parser.add_argument(
            "--settle",
            type=float,
            default=None,
            help="with --rekey: seconds to wait for other processes to forget the old keys (default 6)",
        )
        parser.add_argument(
            "--background", action="store_true", help="send the job to the workers instead of running it here"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        arguments: dict[str, Any] = {"batch": options["batch"], "rekey": options["rekey"]}
        if options["settle"] is not None:
            arguments["settle"] = max(0.0, options["settle"])
        if options["background"]:
            run = job_enqueue(kind="encryption_rotate", task_name=encryption_rotate_job.name, arguments=arguments)
            self.stdout.write(f"job {run.pk} queued")
            return
        # Called directly, the job runs here (its errors fail the run and are raised).
        run = JobRun.objects.create(kind="encryption_rotate", arguments=arguments)
        try:
            encryption_rotate_job(run.pk)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        run.refresh_from_db()
        self.stdout.write(json.dumps(run.result))
