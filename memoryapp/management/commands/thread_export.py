from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser

from memory_project.commands import ProjectCommand
from memoryapp.errors import DomainError
from memoryapp.models import Agent
from memoryapp.threads.selectors import thread_for_agent
from memoryapp.threads.transfer import thread_export_lines


class Command(ProjectCommand):
    help = "Write the thread THREAD_ID of agent AGENT_SLUG as JSONL (000's node/head records) to --output or stdout."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent_slug")
        parser.add_argument("thread_id")
        parser.add_argument("--output", "-o", default="-", help="a file path, or - for stdout")

    def handle(self, *args: Any, agent_slug: str, thread_id: str, output: str, **options: Any) -> None:
        agent = Agent.objects.filter(slug=agent_slug).first()
        if agent is None:
            raise CommandError(f"No agent {agent_slug!r}.")
        try:
            thread = thread_for_agent(agent=agent, external_id=thread_id)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        count = 0
        out = sys.stdout if output == "-" else open(output, "w", encoding="utf-8")  # noqa: SIM115
        try:
            for line in thread_export_lines(thread=thread):
                out.write(line + "\n")
                count += 1
        finally:
            if out is not sys.stdout:
                out.close()
        self.stderr.write(f"exported {thread_id}: {count} records")
