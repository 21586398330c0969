"""python manage.py vectors_inline [--agent SLUG] [--batch 500]

Moves the vectors that rows written before migration 0053 keep in TOAST into their rows (entries,
memory items, knowledge chunks), in batches of one transaction each; safe to stop and run again.
What it costs is in docs/operations.md ("Vectors in the row").
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from memory_project.commands import ProjectCommand
from memoryapp.models import Agent
from memoryapp.search.space import vectors_inline


class Command(ProjectCommand):
    help = "Rewrite the vectors stored out of line (TOAST) into their rows, in batches."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", help="only this agent (slug)")
        parser.add_argument("--batch", type=int, default=500, help="rows read per transaction (default 500)")

    def handle(self, *args: Any, **options: Any) -> None:
        agent_id = None
        if options.get("agent"):
            agent = Agent.objects.filter(slug=options["agent"]).first()
            if agent is None:
                raise CommandError(f"no agent {options['agent']!r}")
            agent_id = agent.pk
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        done = vectors_inline(agent_id=agent_id, batch=options["batch"])
        for table, count in done.items():
            self.stdout.write(f"{table}: {count} vectors moved into their rows")
