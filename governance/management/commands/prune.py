from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from governance.jobs.runs import job_run
from governance.models import JobRun
from governance.retention.services import PRUNE_JOB_KIND, retention_prune, retention_prune_job
from memory_project.commands import ProjectCommand
from memoryapp.models import Agent


class Command(ProjectCommand):
    help = (
        "Apply every retention policy once, here and now (what the daily job does), and print the counts. "
        "--dry-run changes nothing and reports what would go: counts per kind, the first hundred threads."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", metavar="SLUG", help="Only this agent's memory (its policy, else the default).")
        parser.add_argument("--dry-run", action="store_true", help="Count what would be deleted; delete nothing.")

    def handle(self, *args: Any, agent: str | None = None, dry_run: bool = False, **options: Any) -> None:
        chosen = None
        if agent:
            chosen = Agent.objects.filter(slug=agent).first()
            if chosen is None:
                raise CommandError(f"no agent has the slug {agent!r}")
        if dry_run:
            self.stdout.write(json.dumps(retention_prune(agent=chosen, dry_run=True).report(), indent=2))
            return
        # A real prune is a job run done in this process: recorded, counted, resumable like the job's.
        run = JobRun.objects.create(
            kind=PRUNE_JOB_KIND,
            agent_id=chosen.pk if chosen else None,
            arguments={"as_of": timezone.now().isoformat(), "agent": agent or "", "actor": "manage.py prune"},
        )
        done = job_run(run.pk, retention_prune_job)
        if done is None or done.status != JobRun.Status.SUCCEEDED:
            raise CommandError(f"the prune (job run {run.pk}) did not finish: {done.error if done else 'not started'}")
        self.stdout.write(json.dumps({"job_run": run.pk, **done.result}, indent=2))
