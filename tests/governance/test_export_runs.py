"""The export of a person holds their run ledger (issue 25 §4): each run of their threads, with its
latest snapshot and the events it kept; and each run of another person's thread whose events or
snapshot name them (per the subject index), with only those places, not the rest of the run."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from governance.export import services as export
from governance.export.services import export_request_create, export_run
from governance.models import ExportRequest
from tests.kit.api import Caller, post_ok, post_thread
from tests.kit.mentions import EMAIL, IDENTIFIERS, PERSON
from tests.threads.test_run_ledger import SNAP_1

HERS = {**SNAP_1, "messages": [{"role": "user", "content": "Book me a window seat to Lisbon."}]}
CARLS = {**SNAP_1, "messages": [{"role": "user", "content": f"Send it to {EMAIL}; I keep the aisle seat."}]}


@pytest.fixture(autouse=True)
def export_dir(tmp_path: Path, settings: Any) -> Path:
    settings.EXPORT_DIR = str(tmp_path / "exports")
    return tmp_path


def _run(caller: Caller, thread_id: str, user_id: str, *events: dict[str, Any]) -> str:
    post_thread(caller, thread_id, user_id=user_id)
    run_id = str(post_ok(caller.client, f"/api/v1/threads/{thread_id}/runs", {})["id"])
    post_ok(caller.client, f"/api/v1/threads/{thread_id}/runs/{run_id}/events", {"events": list(events)})
    return run_id


def _exported(caller: Caller) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    request = export_request_create(user_id=PERSON, agent_ids=[caller.agent.pk], actor="staff:officer")
    export_run(request_id=request.pk)
    request.refresh_from_db()
    assert request.status == ExportRequest.Status.DONE, request.error
    path = export.export_archive_path(request)
    assert path is not None
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        lines = archive.read("runs.jsonl").decode().splitlines()
    return manifest, [json.loads(line)["run"] for line in lines if line]


def test_the_export_holds_her_runs_and_the_places_others_runs_name_her(alice: Caller, bob: Caller) -> None:
    assert alice.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json").status_code == 200
    hers = _run(
        alice,
        "t-ines",
        PERSON,
        {"kind": "text_delta", "delta": "Window seat"},
        {"kind": "settled", "snapshot": HERS},
    )
    carls = _run(
        alice,
        "t-carl",
        "u-carl",
        {"kind": "text_delta", "delta": "Aisle for Carl"},
        {"kind": "text_delta", "delta": f"and a copy to {EMAIL}"},
        {"kind": "snapshot", "snapshot": CARLS},
    )
    _run(bob, "t-bob", PERSON, {"kind": "text_delta", "delta": "bob's agent is not asked for"})

    manifest, runs = _exported(alice)

    by_id = {run["id"]: run for run in runs}
    assert set(by_id) == {hers, carls}
    mine = by_id[hers]
    assert mine["theirs"] and mine["snapshot"] == HERS and mine["ledger_outcome"] == "settled"
    assert [(e["seq"], e["kind"]) for e in mine["events"]] == [(1, "text_delta"), (2, "settled")]
    other = by_id[carls]
    assert not other["theirs"] and other["thread_id"] == "t-carl" and "snapshot" not in other
    assert [e["seq"] for e in other["events"]] == [2, 3]  # the events naming her, not Carl's first
    assert EMAIL in other["events"][0]["excerpts"][0] and EMAIL in other["snapshot_excerpts"][0]
    assert "Aisle for Carl" not in json.dumps(other)
    assert (manifest["counts"]["runs"], manifest["counts"]["run_events"]) == (2, 4)
