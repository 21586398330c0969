from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from memory_project.commands import ProjectCommand
from memoryapp.agents.services import agent_get_or_create, agent_key_create, agent_limits_set


class Command(ProjectCommand):
    help = (
        "Create the agent SLUG if it does not exist and a new API key for it; the key alone is the last line "
        "(several slugs: one key a line, in their order). --rate-per-minute and --heavy-concurrency set the "
        "agents' limits (audited, as on an agent's admin page)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slugs", nargs="+", metavar="slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--key-name", default="agent_create")
        parser.add_argument("--rate-per-minute", type=int, default=None, help="requests a minute per key (0: none)")
        parser.add_argument("--heavy-concurrency", type=int, default=None, help="searches/builds at once per key")

    def handle(
        self,
        *args: Any,
        slugs: list[str],
        name: str,
        key_name: str,
        rate_per_minute: int | None,
        heavy_concurrency: int | None,
        **options: Any,
    ) -> None:
        for slug in slugs:
            self._one(slug=slug, name=name, key_name=key_name, limits=self._limits(rate_per_minute, heavy_concurrency))

    @staticmethod
    def _limits(rate_per_minute: int | None, heavy_concurrency: int | None) -> dict[str, object]:
        limits: dict[str, object] = {}
        if rate_per_minute is not None:
            limits["rate_limit_per_minute"] = rate_per_minute
        if heavy_concurrency is not None:
            limits["heavy_concurrency"] = heavy_concurrency
        return limits

    def _one(self, *, slug: str, name: str, key_name: str, limits: dict[str, object]) -> None:
        agent, created = agent_get_or_create(slug=slug, name=name, actor="cli")
        if limits:
            agent_limits_set(agent=agent, values=limits, actor="cli")
        _, raw = agent_key_create(agent=agent, name=key_name, actor="cli")
        self.stderr.write(f"{'created' if created else 'found'} agent {agent.slug}; new key (shown once):")
        self.stdout.write(raw)
