"""A person's erasure in `redact` mode keeps their threads but not what their runs published
(review of 70a3910): the run ledger's events (the model's deltas, snapshots of the conversation)
and the run's latest snapshot hold their words as much as the entries do."""

from __future__ import annotations

from memoryapp.models import RunEvent, ThreadRun
from tests.kit.api import Caller, post_ok
from tests.threads.test_run_ledger import SNAP_1, publish, started

SAID = {**SNAP_1, "messages": [{"role": "user", "content": "My passport is P-7731, renew it."}]}


def test_a_redact_erasure_takes_the_run_ledger_of_the_persons_threads(alice: Caller) -> None:
    run_id = started(alice)
    publish(alice, run_id, {"kind": "text_delta", "delta": "Renewing P-7731"}, {"kind": "snapshot", "snapshot": SAID})
    assert ThreadRun.objects.get(pk=run_id).snapshot == SAID

    post_ok(alice.client, "/api/v1/users/u-ana/forget", {"mode": "redact"}, status=200)

    run = ThreadRun.objects.get(pk=run_id)  # the thread stays in redact mode, and its runs
    assert run.snapshot is None
    assert not RunEvent.objects.filter(run_id=run_id).exists()
