from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from memory_project.commands import ProjectCommand
from memoryapp.agents.services import agent_get_or_create, agent_key_create


class Command(ProjectCommand):
    help = "Create the agent SLUG if it does not exist and a new API key for it; the key alone is the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--key-name", default="agent_create")

    def handle(self, *args: Any, slug: str, name: str, key_name: str, **options: Any) -> None:
        agent, created = agent_get_or_create(slug=slug, name=name, actor="cli")
        _, raw = agent_key_create(agent=agent, name=key_name, actor="cli")
        self.stderr.write(f"{'created' if created else 'found'} agent {agent.slug}; new key (shown once):")
        self.stdout.write(raw)
