"""python manage.py vectors_quantize [--agent SLUG] [--batch 500]

Fills the sign bits (migration 0063) of the entries embedded before it, in batches of one
transaction each; safe to stop and run again. Until then a thread's search compares those rows by
their full vectors. What it costs is in docs/operations.md ("A thread's vectors in a large table").
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from memory_project.commands import ProjectCommand
from memoryapp.models import Agent
from memoryapp.search.space import vectors_quantize


class Command(ProjectCommand):
    help = "Fill the sign bits of the entries embedded before migration 0063, in batches."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", help="only this agent (slug)")
        parser.add_argument("--batch", type=int, default=500, help="rows written per transaction (default 500)")

    def handle(self, *args: Any, **options: Any) -> None:
        agent_id = None
        if options.get("agent"):
            agent = Agent.objects.filter(slug=options["agent"]).first()
            if agent is None:
                raise CommandError(f"no agent {options['agent']!r}")
            agent_id = agent.pk
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        done = vectors_quantize(agent_id=agent_id, batch=options["batch"])
        self.stdout.write(f"memoryapp_entry: {done} vectors given their sign bits")
