"""python manage.py reembed [--agent SLUG] [--dimensions] [--background]

Re-embeds every entry, memory item and knowledge-document chunk (of one agent, or all) with the
configured embedder (after a change of EMBEDDING_MODEL, say), in batches, recorded as a JobRun of kind "reembed". With --dimensions, first gives the vector
columns the configured EMBEDDING_DIMENSIONS (dropping the stored vectors and rebuilding the
HNSW indexes), which is what /readyz asks for when the model's dimension changed.
Without --agent, it records the configured model as the vectors' (memoryapp.models.VectorSpace)
when it finishes; while it runs the record names the old model, `moving_to` the new one.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from governance.jobs.broker import job_enqueue
from governance.models import JobRun
from memory_project.commands import ProjectCommand
from memoryapp.management.options import agent_of_options, agent_option_add
from memoryapp.search.space import column_dimensions, vector_columns_resize
from memoryapp.tasks.embedding import embed_all_again


class Command(ProjectCommand):
    help = "Re-embed entries, memory items and knowledge chunks with the configured embedder (a job, in batches)."

    def add_arguments(self, parser: CommandParser) -> None:
        agent_option_add(parser)
        parser.add_argument(
            "--dimensions",
            action="store_true",
            help="first resize the vector columns to EMBEDDING_DIMENSIONS (stored vectors are dropped)",
        )
        parser.add_argument(
            "--background", action="store_true", help="send the job to the workers instead of running it here"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        agent_id = agent_of_options(options)
        stored = column_dimensions()
        configured = settings.EMBEDDING_DIMENSIONS
        if options["dimensions"]:
            if stored != configured:
                if agent_id is not None:
                    raise CommandError("--dimensions changes every agent's vectors: leave out --agent")
                vector_columns_resize(configured)
                self.stdout.write(f"vector columns resized from {stored} to {configured} dimensions")
        elif stored != configured:
            raise CommandError(
                f"the vector columns have {stored} dimensions but the embedder makes {configured}: "
                "run with --dimensions"
            )
        if options["background"]:
            run = job_enqueue(
                kind="reembed", task_name=embed_all_again.name, arguments={"agent_id": agent_id}, agent_id=agent_id
            )
            self.stdout.write(f"job {run.pk} queued")
            return
        # Called directly, the job runs here (its errors fail the run and are raised).
        run = JobRun.objects.create(kind="reembed", agent_id=agent_id, arguments={"agent_id": agent_id})
        embed_all_again(run.pk)
        run.refresh_from_db()
        self.stdout.write(f"job {run.pk}: {run.result}")
