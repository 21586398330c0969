"""What staff do over the memory domain, one package per role (the import contracts in pyproject.toml
keep the layers; tests/foundation/test_contracts.py fails when a package is in none).

Leaves, which every app may use and which import nothing of memoryapp:
- audit: the audit trail, a hash chain anchored outside the database, and its verification;
- jobs: job runs, the one `@job` decorator, the hand-over to the broker, the sweep, beat schedules;
- crypto: encryption at rest (keys, sealed fields, blind index, rotation);
- models: the governance models (job runs, audit records, erasure and export requests, data keys);
- locks: the keys of every PostgreSQL advisory lock; receipts: signed receipts of reports.

Workflows, between the outer layer (admin, tasks, APIs) and memoryapp's capabilities:
- erasure: an erasure request's filing, its job, its report, its admin;
- export: an export request's filing, its job (the archive), its admin and staff API;
- retention: policies, legal holds, the prune and their admin;
- staff: what every staff page shares: roles, list cells, the confirmation of an irreversible
  action with its consequences counted by a dry run;
- console: staff pages across areas: the overview on the admin index, its charts and activity,
  the review queue's reads, the audit trail's and job runs' admin.

The outer layer: `admin` (the one place the governance admin is registered), `tasks` (the Celery
tasks, `governance.tasks.*`), `apps`, `management`, `templatetags`, `wellknown` (the receipts' key).
"""
