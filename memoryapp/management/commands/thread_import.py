from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser

from memory_project.commands import ProjectCommand
from memoryapp.errors import DomainError
from memoryapp.models import Agent
from memoryapp.threads.transfer import thread_import_lines


class Command(ProjectCommand):
    help = "Create a thread of agent AGENT_SLUG from a JSONL export (a file, or - for stdin); --id names it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent_slug")
        parser.add_argument("input", help="a file path, or - for stdin")
        parser.add_argument("--id", dest="thread_id", default=None, help="the new thread's id (default: the file's)")

    def handle(self, *args: Any, agent_slug: str, input: str, thread_id: str | None, **options: Any) -> None:
        agent = Agent.objects.filter(slug=agent_slug).first()
        if agent is None:
            raise CommandError(f"No agent {agent_slug!r}.")
        if input == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(input, encoding="utf-8") as source:
                lines = source.read().splitlines()
        try:
            thread = thread_import_lines(agent=agent, lines=lines, external_id=thread_id, actor="cli")
        except DomainError as exc:
            where = f" ({exc.field})" if exc.field else ""
            raise CommandError(f"{exc.code}: {exc.message}{where}") from exc
        self.stdout.write(thread.external_id)
