"""What the management commands over an agent's vectors read of their options alike."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from memoryapp.models import Agent


def agent_option_add(parser: CommandParser) -> None:
    parser.add_argument("--agent", help="only this agent (slug)")


def batch_option_add(parser: CommandParser, *, what: str) -> None:
    parser.add_argument("--batch", type=int, default=500, help=f"rows {what} per transaction (default 500)")


def agent_of_options(options: dict[str, Any]) -> int | None:
    """The id of `--agent`'s agent, or None for every agent; an unknown slug is a CommandError."""
    if not options.get("agent"):
        return None
    agent = Agent.objects.filter(slug=options["agent"]).first()
    if agent is None:
        raise CommandError(f"no agent {options['agent']!r}")
    return int(agent.pk)


def batch_of_options(options: dict[str, Any]) -> int:
    if options["batch"] < 1:
        raise CommandError("--batch must be at least 1")
    return int(options["batch"])
