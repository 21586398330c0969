"""The export of a person holds their mentions (issue 25 §4): the rows of others naming them by an
identifier registered with the agent, found through the subject index, each with the places it
names them, and nothing of another agent's rows."""

from __future__ import annotations

import json
import zipfile
from typing import Any

from governance.export import services as export
from governance.export.services import export_request_create, export_run
from governance.models import ExportRequest
from tests.kit.api import Caller
from tests.kit.mentions import CARL_SAYS, IDENTIFIERS, PERSON, plant


def _exported(caller: Caller) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    request = export_request_create(user_id=PERSON, agent_ids=[caller.agent.pk], actor="staff:officer")
    export_run(request_id=request.pk)
    request.refresh_from_db()
    assert request.status == ExportRequest.Status.DONE, request.error
    path = export.export_archive_path(request)
    assert path is not None
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        lines = archive.read("mentions.jsonl").decode().splitlines()
    return manifest, [json.loads(line)["mention"] for line in lines if line]


def test_the_export_holds_the_rows_of_others_naming_the_person(alice: Caller, bob: Caller) -> None:
    plant(alice)
    plant(bob)
    assert alice.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json").status_code == 200

    manifest, mentions = _exported(alice)

    tables = {m["table"] for m in mentions}
    assert tables >= {"entry", "thread", "item", "entity", "file_version"}
    assert manifest["counts"]["mentions"] == len(mentions)
    assert all(m["agent_id"] == alice.agent.pk for m in mentions)
    excerpts = " ".join(e for m in mentions for e in m["excerpts"])
    assert "Valdomiro" in excerpts and "912 345 678" in excerpts
    assert CARL_SAYS not in excerpts  # another person's words are not the person's data


def test_without_registered_identifiers_the_export_has_an_empty_mentions_part(alice: Caller) -> None:
    plant(alice)
    manifest, mentions = _exported(alice)
    assert mentions == [] and manifest["counts"]["mentions"] == 0
