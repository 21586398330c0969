"""The Celery app: broker from settings (REDIS_URL or the embedded Redis), tasks from the apps."""

import gc
import logging
import os
from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_process_shutdown

from governance.audit.anchor_file import anchors_sync
from governance.crypto.startup import encryption_startup_check
from memoryapp.screening.recognizers import screening_warm_up
from memoryapp.search.embedders import local_model_load_before_fork, torch_kept_out

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")

logger = logging.getLogger(__name__)

app = Celery("memory_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _encryption_keys_present(**kwargs: Any) -> None:
    """A worker refuses to start on a database whose encryption keys it lacks."""
    encryption_startup_check()


# The queues whose jobs never write screened text (screening runs on what agents and extraction write).
UNSCREENED_QUEUES = {"embedding", "governance"}


@worker_init.connect
def _embedding_model_before_fork(sender: Any = None, **kwargs: Any) -> None:
    """A worker that takes embedding jobs loads the local model in its parent process, before the
    pool forks its children: they share one copy (memoryapp.search.embedders
    .local_model_load_before_fork) instead of one each, and a child that replaces one that exited
    has it at once. A worker of other queues only (CELERY_QUEUES=governance) loads nothing.

    Likewise a worker whose jobs write screened text (extraction's items, imports) builds
    screening's detectors in the parent (Presidio's import: seconds and ~380 MB, once for the pool,
    not once a child at its first screened job)."""
    torch_kept_out()  # before anything imports it where nothing configured uses it
    queues = getattr(getattr(getattr(sender, "app", None), "amqp", None), "queues", None)
    consumed = set(getattr(queues, "consume_from", None) or queues or ())
    if (not consumed or "embedding" in consumed) and (reason := local_model_load_before_fork()):
        logger.warning("embedding model not loaded before fork: %s", reason)
    if not consumed or not consumed <= UNSCREENED_QUEUES:
        screening_warm_up()
    gc.freeze()  # see memory_project.gunicorn_config.on_starting


@worker_process_shutdown.connect
def _audit_anchors_synced(**kwargs: Any) -> None:
    """A pool process ends without Python's exit handlers (billiard leaves by os._exit): the audit
    anchor lines it wrote and has not yet fsynced are synced here (governance.audit.anchor_file)."""
    anchors_sync()
