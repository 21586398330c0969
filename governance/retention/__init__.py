"""Retention: how long memory is kept, and what nothing may remove (002 RetentionOptions).

- policies: the policies' reads (the one in force for an agent, a suggestion's deadline) and
  writes (saved, deleted; audited);
- services: the prune that applies them, with its dry run, its job and its state for the overview;
- pruning: the prune's steps on one thread (trim branches and checkpoints, expire tool results);
- holds: placing and lifting legal holds (audited);
- held: the reads of the holds in force, asked first by the prune and by erasure;
- admin: the pages of policies, legal holds and the prune.

The models (`RetentionPolicy`, `LegalHold`) stay in `memoryapp.models.retention`, where their
migrations are.
"""
