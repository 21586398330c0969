"""The test kit: what many test modules need, written once.

- `factories`: factory_boy factories of the domain's rows, made through the services that keep
  their invariants (an entry's seq, parent, hash and the thread's leaf; an item's merge,
  supersession and checked quotes; a file version's sequence and sha256).
- `api`: the fixed cast's `Caller`, calls over the agent API that check their status, and the
  one check of the error shape.
- `admin`: staff clients of the admin.
- `recall`: what the search and context tests share (the embedding job, a failing embedder).
- `files`: reading a memory file as the model sees it.
- `concurrency`: work run in threads of their own (own database connections), started together.
- `servers`: free ports, a local HTTP server speaking a model provider's protocol, database URLs.
"""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
