"""Jobs of the tests that real worker processes run (`Worker(include="tests.kit.worker_jobs")`)."""

from __future__ import annotations

import time

from celery.exceptions import SoftTimeLimitExceeded

from governance.jobs.declare import job
from governance.models import JobRun

# The hard time limit of `outlives_its_time_limit`: Celery's worker kills the pool process running it.
TINY_TIME_LIMIT = 2


@job(
    name="tests.kit.worker_jobs.outlives_its_time_limit",
    queue="governance",
    soft_time_limit=1,
    time_limit=TINY_TIME_LIMIT,
)
def outlives_its_time_limit(run: JobRun) -> dict[str, int]:
    """Runs far past its hard time limit, deaf to the soft one (as a job stuck in C code is)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            time.sleep(deadline - time.monotonic())
        except SoftTimeLimitExceeded:
            continue
    return {"slept": 600}
