"""Job runs (a leaf: it imports nothing of memoryapp).

- runs: the JobRun bookkeeping: the lock that makes one process run a run, start, progress,
  usage, finish, skip, fail, and `job_run`, the body of every job;
- retry: staff send a failed run again;
- schedules: the schedules page's reads (each beat schedule with its last run).

Its admin page (the list, progress, retry, schedules) is in `governance.console.admin`.
"""
