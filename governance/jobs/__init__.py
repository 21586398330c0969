"""Job runs, the one job decorator, and the beat schedules (a leaf: it imports nothing of memoryapp).

A job is declared once, with `@job(name=..., queue=..., transient=..., retries=..., ...)` on a
function `work(run) -> result`: the decorator registers the Celery task and does the JobRun
bookkeeping (claim, finish, skip, fail, back to queued before a retry), so no task can forget it.
Services ask for a job with `job_enqueue(kind=..., task_name=...)`: by name, after commit, so a
service never imports a task module (tasks import services, never the other way). Beat tasks are
declared with `@tick(...)` and scheduled in SCHEDULES, kept in the database on every migrate.

Nothing is lost, nothing runs twice at once:

1. A run is handed to the broker after commit; `sent_at` records that the broker took it. A send
   that fails (Redis away) is logged, never raised: the write stands and the run stays queued.
   After a failed send the process stops asking the broker for BROKER_BREAKER_SECONDS (a breaker),
   so a broker that hangs costs one request its timeout, not every write of the outage.
2. A never-sent queued run is sent again by the next `job_enqueue` of its dedupe key, and by the
   job sweep (`jobs_sweep`, beat every minute). A sent run not started JOB_RESEND_AFTER_SECONDS
   after its countdown is sent again when the broker lost its data since (a Redis restart without
   persistence), and otherwise at most JOB_RESEND_MAX times, only while its queue is empty (with
   messages waiting, a copy would only wait behind them), looked at after doubling waits; a run
   waiting that long says so in its error ("not taken by any worker of queue ... since ...").
3. The process running a run holds a PostgreSQL session advisory lock on it. When the process
   dies (kill -9, out of memory, a lost host), PostgreSQL frees the lock as the connection drops:
   a free lock on a `running` run means its worker is gone. The message of a pool child killed
   mid-task comes back at once (acks_late + reject_on_worker_lost) and claims the run; a run
   whose whole worker died is put back to queued and sent by the sweep. A pool child killed by
   the job's hard time limit fails its run at once (it would only time out again).
4. However often a run is sent, `job_start` claims it only with its lock: one process runs it
   at a time, and a finished run is never started again.
5. An error the job declares transient, on an attempt Celery will retry, puts the run back to
   queued before the retry is sent, so the retry claims it; any other error, or the last
   attempt's, fails the run.

The lock is a session-level advisory lock: every process that runs jobs (workers, and web
processes running a job in a request) needs a database session of its own for as long as the job
runs. A pooler in transaction mode (PgBouncer `pool_mode = transaction`) hands the session to other
clients between transactions and breaks it; use session pooling, or a direct connection, for them.

The modules:
- runs: the JobRun bookkeeping (the run's lock, start, progress, usage, finish, skip, fail) and
  `job_run`, the body of every job (points 3 to 5);
- broker: `job_send` and `job_enqueue`, the breaker, the debounce marks, the broker's epoch (1, 2);
- declare: `@job` and `@tick`;
- sweep: `jobs_sweep` (beat, every minute) and `jobs_waiting` (2, 3);
- schedules: SCHEDULES, kept in the database by `schedules_sync`, and the schedules page's reads;
- retry: staff send a failed run again.

Its admin page (the list, progress, retry, schedules) is in `governance.console.admin`.
"""
