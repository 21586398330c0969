"""The Celery app: broker from settings (REDIS_URL or the embedded Redis), tasks from the apps."""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

from governance.crypto.startup import encryption_startup_check

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")

app = Celery("memory_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _encryption_keys_present(**kwargs: Any) -> None:
    """A worker refuses to start on a database whose encryption keys it lacks."""
    encryption_startup_check()
