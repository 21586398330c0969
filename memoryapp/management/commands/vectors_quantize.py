"""python manage.py vectors_quantize [--agent SLUG] [--batch 500]

Fills the sign bits (migration 0063) of the entries embedded before it, in batches of one
transaction each; safe to stop and run again. Until then a thread's search compares those rows by
their full vectors. What it costs is in docs/operations.md ("A thread's vectors in a large table").
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from memory_project.commands import ProjectCommand
from memoryapp.management.options import agent_of_options, agent_option_add, batch_of_options, batch_option_add
from memoryapp.search.space import vectors_quantize


class Command(ProjectCommand):
    help = "Fill the sign bits of the entries embedded before migration 0063, in batches."

    def add_arguments(self, parser: CommandParser) -> None:
        agent_option_add(parser)
        batch_option_add(parser, what="written")

    def handle(self, *args: Any, **options: Any) -> None:
        done = vectors_quantize(agent_id=agent_of_options(options), batch=batch_of_options(options))
        self.stdout.write(f"memoryapp_entry: {done} vectors given their sign bits")
