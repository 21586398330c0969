"""The export of a person holds the graph's edges about them (issue 25, review of ab19531): the
edges of their scope, and the edges of others standing on a quote of their words, each with its
names, predicate and the quotes of their entries; nothing of another person's edges."""

from __future__ import annotations

import json
import zipfile
from typing import Any

from governance.export import services as export
from governance.export.services import export_request_create, export_run
from governance.models import ExportRequest
from memoryapp.graph.services import relation_write
from memoryapp.items.rules import Scope
from tests.kit.api import Caller
from tests.kit.factories import EntryFactory, ThreadFactory


def _exported(caller: Caller, user_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    request = export_request_create(user_id=user_id, agent_ids=[caller.agent.pk], actor="staff:officer")
    export_run(request_id=request.pk)
    request.refresh_from_db()
    assert request.status == ExportRequest.Status.DONE, request.error
    path = export.export_archive_path(request)
    assert path is not None
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        lines = archive.read("relations.jsonl").decode().splitlines()
    return manifest, [json.loads(line)["relation"] for line in lines if line]


def test_the_export_of_a_person_holds_the_edges_about_them(alice: Caller) -> None:
    anas = ThreadFactory(agent=alice.agent, external_id="t-ana", user_id="u-ana")
    said = EntryFactory(thread=anas, role="user", content="Caroline is my sister.")
    mine = relation_write(
        agent=alice.agent,
        subject="Caroline",
        predicate="sister of",
        object="Ana",
        scope=Scope(user_id="u-ana"),
        evidence=[{"entry_id": said.pk, "quote": "Caroline is my sister"}],
    )
    # An agent-wide edge standing on her words, and another person's edge.
    shared = relation_write(
        agent=alice.agent,
        subject="Caroline",
        predicate="related to",
        object="Ana",
        evidence=[{"entry_id": said.pk, "quote": "Caroline is my sister"}],
    )
    bens = ThreadFactory(agent=alice.agent, external_id="t-ben", user_id="u-ben")
    his = EntryFactory(thread=bens, role="user", content="Melanie works at Acme.")
    relation_write(
        agent=alice.agent,
        subject="Melanie",
        predicate="works at",
        object="Acme",
        scope=Scope(user_id="u-ben"),
        evidence=[{"entry_id": his.pk, "quote": "Melanie works at Acme"}],
    )

    manifest, relations = _exported(alice, "u-ana")

    assert {r["id"] for r in relations} == {mine.pk, shared.pk}
    first = next(r for r in relations if r["id"] == mine.pk)
    assert (first["subject"], first["predicate"], first["object"]) == ("Caroline", "sister of", "Ana")
    assert first["quotes"] == [{"entry_id": said.pk, "quote": "Caroline is my sister"}]
    assert manifest["counts"]["relations"] == 2
