"""python manage.py vector_space [--record EMBEDDER:MODEL]

Prints what made the stored vectors (the record of memoryapp.models.VectorSpace) against the
configured embedder. With --record, says what made them without embedding anything: for a
deployment whose vectors were made otherwise than migration 0057 assumed (EMBEDDER=local,
all-MiniLM-L6-v2). `reembed` records the configured model by itself when it finishes.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from memory_project.commands import ProjectCommand
from memoryapp.search.space import space_record, vector_space_status


class Command(ProjectCommand):
    help = "Show (or --record) which embedder and model made the stored vectors."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--record", metavar="EMBEDDER:MODEL", help="record what made the stored vectors")

    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("record"):
            embedder, sep, model = options["record"].partition(":")
            if not sep or embedder not in ("local", "openai", "gemini", "fake") or not model:
                raise CommandError("--record takes EMBEDDER:MODEL, EMBEDDER one of local, openai, gemini, fake")
            if embedder == "local" and model not in settings.LOCAL_EMBEDDING_MODELS:
                raise CommandError(f"no local model {model!r}: one of {', '.join(settings.LOCAL_EMBEDDING_MODELS)}")
            space_record(embedder=embedder, model=model)
        status = vector_space_status()
        self.stdout.write(f"recorded: {status.recorded or '(nothing embedded yet)'}")
        self.stdout.write(f"configured: {status.configured or settings.EMBEDDER}")
        self.stdout.write(status.message)
