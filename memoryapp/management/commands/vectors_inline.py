"""python manage.py vectors_inline [--agent SLUG] [--batch 500]

Moves the vectors that rows written before migration 0053 keep in TOAST into their rows (entries,
memory items, knowledge chunks), in batches of one transaction each; safe to stop and run again.
What it costs is in docs/operations.md ("Vectors in the row").
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from memory_project.commands import ProjectCommand
from memoryapp.management.options import agent_of_options, agent_option_add, batch_of_options, batch_option_add
from memoryapp.search.space import vectors_inline


class Command(ProjectCommand):
    help = "Rewrite the vectors stored out of line (TOAST) into their rows, in batches."

    def add_arguments(self, parser: CommandParser) -> None:
        agent_option_add(parser)
        batch_option_add(parser, what="read")

    def handle(self, *args: Any, **options: Any) -> None:
        done = vectors_inline(agent_id=agent_of_options(options), batch=batch_of_options(options))
        for table, count in done.items():
            self.stdout.write(f"{table}: {count} vectors moved into their rows")
