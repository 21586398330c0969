"""A database written with encryption on, through the API: a pg_dump of it holds none of the words
planted in entries, tool calls and results, items, facts, entity names, memory files, compaction
summaries and atoms, and job results; everything still reads whole through the API."""

from __future__ import annotations

import json
from typing import Any

from governance.models import JobRun
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Entity, Entry
from tests.kit.api import Caller, answered, create_memory_file, post_entries, post_item, post_thread, use_memory_tool
from tests.kit.crypto import assert_none_planted, pg_dump
from tests.kit.factories import EntityFactory, JobRunFactory
from tests.kit.servers import database_conninfo

ENTRY = "Zanzibarquill"
TOOL_ARG = "quokkaparade"
TOOL_RESULT = "tangerinecipher"
ITEM = "Marmalade Fjord"
FACT = "plumbago-vortex"
ENTITY = "Quetzalmoor"
FILE = "obsidianlantern"
SUMMARY = "velvetcartography"
ATOM = "saffronhalyard"
JOB = "wolframcanticle"
# The extraction that follows a compaction asks the model too: it finds nothing.
NOTHING_EXTRACTED = ["[]"] * 4
PLANTED = [ENTRY, TOOL_ARG, TOOL_RESULT, ITEM, FACT, ENTITY, FILE, SUMMARY, ATOM, JOB]


def _conversation(alice: Caller) -> None:
    post_thread(alice, "t-dump", user_id="u-ana")
    post_entries(
        alice,
        "t-dump",
        [
            {"role": "user", "content": f"My {ENTRY} notebook is in the cabin, near {ITEM}"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": TOOL_ARG}}],
            },
            {"type": "tool_result", "tool_call_id": "c1", "content": f"{TOOL_RESULT} " + "lorem ipsum " * 50},
            {"role": "assistant", "content": "Noted, the notebook is in the cabin."},
            {"role": "user", "content": "Thanks. Let us plan the trip next."},
        ],
    )


def _summarize(alice: Caller) -> None:
    """A summary, then hierarchical atoms, each by a scripted model through the compaction API."""
    with use_model(ScriptedModel([f"The user keeps a notebook; {SUMMARY}.", *NOTHING_EXTRACTED])):
        answered(
            alice.client.post(
                "/api/v1/threads/t-dump/compact",
                {"strategy": "summarize-old-preserve-recent", "preserve_recent_turns": 1},
                format="json",
            ),
            (201, 202),
        )
    post_entries(
        alice,
        "t-dump",
        [
            {"role": "user", "content": "We must leave before noon."},
            {"role": "assistant", "content": "Leaving before noon."},
        ],
    )
    atoms = [
        {
            "kind": "constraint",
            "status": "open",
            "text": f"Leave before noon ({ATOM})",
            "evidence": [{"message": 1, "quote": "We must leave before noon."}],
        }
    ]
    with use_model(ScriptedModel([json.dumps(atoms), *NOTHING_EXTRACTED])):
        answered(
            alice.client.post(
                "/api/v1/threads/t-dump/compact",
                {"strategy": "hierarchical", "keep_recent": 0, "keep_recent_tokens": None},
                format="json",
            ),
            (201, 202),
        )


def test_a_dump_of_a_database_written_with_encryption_on_holds_none_of_the_planted_words(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    _conversation(alice)
    item = post_item(alice, kind="fact", subject="Ana", attribute="cabin", value=f"near {ITEM}", user_id="u-ana")
    answered(alice.client.put("/api/v1/facts/users/u-ana/dish", {"value": {"name": FACT}}, format="json"), (200, 201))
    EntityFactory(agent=alice.agent, name=f"{ENTITY} Lighthouse", user_id="u-ana")
    create_memory_file(alice, "/memories/ana.md", f"Ana keeps an {FILE}.\n", url="/api/v1/memory-tool?user_id=u-ana")
    _summarize(alice)
    JobRunFactory(agent_id=alice.agent.pk, result={"note": JOB})

    dump = pg_dump(database_conninfo())
    assert "enc:v1:dk" in dump
    assert_none_planted(dump, PLANTED)

    # Everything reads whole.
    path = answered(alice.client.get("/api/v1/threads/t-dump/path?types=all"), 200)["results"]
    texts = json.dumps(path)
    for word in (ENTRY, TOOL_ARG, SUMMARY, ATOM):
        assert word in texts, word
    assert answered(alice.client.get(f"/api/v1/items/{item['id']}"), 200)["value"] == f"near {ITEM}"
    assert FACT in json.dumps(answered(alice.client.get("/api/v1/facts/users/u-ana/dish"), 200))
    status, shown = use_memory_tool(
        alice, {"command": "view", "path": "/memories/ana.md"}, "/api/v1/memory-tool?user_id=u-ana"
    )
    assert status == 200 and FILE in json.dumps(shown)
    assert f"{ENTITY} Lighthouse" in {e.name for e in Entity.objects.filter(agent=alice.agent)}
    assert JobRun.objects.get(kind="test").result == {"note": JOB}
    assert Entry.objects.filter(thread__external_id="t-dump", type="compaction").count() == 2
