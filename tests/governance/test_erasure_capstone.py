"""Issue 25's capstone: one person planted through every write path of the service, in two agents,
then erased, then hunted for wherever the service keeps anything.

Ottília Quarrendon (`u-marrowby-5521`) writes and is written about over the REST API and the MCP
server (a real MCP client), a JSONL import, a fork handed to another person, her messages in that
person's threads, agent-wide items and facts naming her, a project memory file and a context
document naming her, thread and entry metadata, a tool result with her profile, a compaction
summary quoting her, searches and a context build that read her rows (the access log), the change
events all of it makes, and legal holds on her and her thread. Every request goes through the real
gunicorn, whose log is kept under VAR_DIR. Carl (`u-keeper-carl`) is planted beside her: his words
must stay whole.

After the erasure, none of her identifiers, canaries or the ids of her threads may be found, as
written, case-folded, JSON-escaped or URL-quoted, in: a pg_dump of the database, every key and
value of the tests' Redis database, every file under VAR_DIR (archives opened, the service's log
among them). The records kept on purpose name her id (the erasure request, the legal holds, the
register of destroyed data keys: governance.erasure.services.KEPT_ON_PURPOSE) and nothing else of
hers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from governance.erasure.services import KEPT_ON_PURPOSE, erasure_request_file
from governance.export.services import export_request_create
from governance.models import ErasureRequest
from governance.retention.holds import legal_hold_lift, legal_hold_place
from memoryapp.compaction.services import compaction_now
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Agent, Thread
from tests.kit.api import Caller
from tests.kit.crypto import (
    K1,
    encrypted,  # noqa: F401  (the fixture)
    pg_dump,
)
from tests.kit.hunt import (
    dump_outside_copy,
    dump_rows,
    files_texts,
    found_in,
    redis_texts,
    sealed_opened,
)
from tests.kit.servers import database_conninfo, gunicorn_serving

pytestmark = pytest.mark.slow

PERSON = "u-marrowby-5521"
NAME = "Ottília Quarrendon"
EMAIL = "ottilia.quarrendon@zephyr-post.org"
PHONE = "+351 912 345 678"
CARL = "u-keeper-carl"
IDENTIFIERS = {"emails": [EMAIL], "phones": [PHONE], "names": [NAME]}

# Her identifiers, in the forms a row may keep them.
HER_IDS = {
    "user id": PERSON,
    "name": NAME,
    "name folded": "ottilia quarrendon",
    "surname": "quarrendon",
    "e-mail": EMAIL,
    "phone": PHONE,
    "phone e164": "+351912345678",
    "phone digits": "912345678",
}
# Labels of the needles a record kept on purpose may hold (it names whom it was about).
KEPT_LABELS = {"user id"}
# The places she was planted; each a canary of its own, per agent.
PLACES = (
    "thread-meta",
    "entry-meta",
    "rest-turn",
    "rest-reply",
    "tool-call",
    "tool-result",
    "mcp-turn",
    "mcp-fact",
    "mcp-file",
    "import-meta",
    "import-turn",
    "msg-elsewhere",
    "item-about",
    "user-fact",
    "user-file",
    "summary",
    "search-query",
)
CARL_PLACES = ("turn", "mention", "item", "file", "fork-turn")


def canary(agent: str, place: str) -> str:
    return f"zqc{agent}{place.replace('-', '')}zq"


def keeper(agent: str, place: str) -> str:
    return f"kpc{agent}{place.replace('-', '')}kp"


def her_threads(agent: str) -> dict[str, str]:
    return {f"thread {kind} ({agent})": f"trip-zqt{agent}-{kind}" for kind in ("rest", "mcp", "import")}


def needles(agents: tuple[str, ...]) -> dict[str, str]:
    found = dict(HER_IDS)
    for agent in agents:
        found |= {f"canary {place} ({agent})": canary(agent, place) for place in PLACES}
        found |= her_threads(agent)
    return found


# --- planting, over HTTP through gunicorn --------------------------------------------------------


@dataclass
class Http:
    """An agent's key on the service under gunicorn."""

    base: str
    key: str

    def call(self, method: str, path: str, body: Any = None, *, status: tuple[int, ...] = (200, 201)) -> Any:
        response = requests.request(
            method, self.base + path, json=body, headers={"Authorization": f"Bearer {self.key}"}, timeout=120
        )
        assert response.status_code in status, f"{method} {path}: {response.status_code} {response.text[:2000]}"
        return response.json() if response.content else None

    def raw(self, path: str, body: str, content_type: str) -> Any:
        response = requests.post(
            self.base + path,
            data=body.encode(),
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": content_type},
            timeout=120,
        )
        assert response.status_code in (200, 201), f"POST {path}: {response.status_code} {response.text[:2000]}"
        return response.json()


def _over_mcp(http: Http, url: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
    async def main() -> None:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {http.key}"}, timeout=120) as client,
            Client(streamable_http_client(url, http_client=client)) as mcp,
        ):
            for name, arguments in calls:
                result = await mcp.call_tool(name, arguments)
                assert not result.is_error, (name, result.content)

    asyncio.run(main())


def plant(http: Http, agent: str) -> None:
    """Her data and Carl's in one agent, through every write path of the API and the MCP server."""
    c = lambda place: canary(agent, place)  # noqa: E731
    k = lambda place: keeper(agent, place)  # noqa: E731
    rest, mcp_thread, imported = her_threads(agent).values()
    person = quote(PERSON, safe="")
    # Her identifiers, registered with the agent.
    http.call("PUT", f"/api/v1/users/{person}/identifiers", IDENTIFIERS, status=(200,))
    # REST: her thread (metadata), a batch of turns (entry metadata, a sender name, a tool call and
    # its result with her profile).
    http.call(
        "POST",
        "/api/v1/threads",
        {"id": rest, "user_id": PERSON, "metadata": {"contact": EMAIL, "c": c("thread-meta")}},
    )
    http.call(
        "POST",
        f"/api/v1/threads/{rest}/entries",
        {
            "entries": [
                {
                    "role": "user",
                    "content": f"I am {NAME}, write to {EMAIL} or call {PHONE}. {c('rest-turn')}",
                    "sender_name": NAME,
                    "metadata": {"userId": PERSON, "c": c("entry-meta")},
                },
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "c1", "name": "crm_lookup", "arguments": {"who": c("tool-call")}}],
                },
                {
                    "role": "tool",
                    "type": "tool_result",
                    "tool_call_id": "c1",
                    "tool_name": "crm_lookup",
                    "content": f"profile: {NAME}, {PHONE}, {EMAIL}, {c('tool-result')}",
                },
                {"role": "assistant", "content": f"Noted, {c('rest-reply')}."},
                {"role": "user", "content": "Thanks, that is all for today."},
                {"role": "assistant", "content": "You are welcome."},
            ]
        },
    )
    # MCP: a turn, a fact and a memory file in her scope, through the SDK's client.
    _over_mcp(
        http,
        f"{http.base}/mcp/?user_id={person}&thread_id={mcp_thread}",
        [
            ("thread_append", {"entries": [{"role": "user", "content": f"{c('mcp-turn')} from {NAME}"}]}),
            ("remember", {"key": "contact", "value": f"{EMAIL} {c('mcp-fact')}"}),
            ("memory", {"command": "create", "path": "/memories/me.md", "file_text": f"{c('mcp-file')}\n"}),
        ],
    )
    # A JSONL import of a thread of hers.
    header = {
        "type": "thread",
        "format": 2,
        "thread": {"id": imported, "user_id": PERSON, "metadata": {"c": c("import-meta")}},
    }
    node = {"id": "n1", "parent": None, "seq": 1, "turn": {"role": "user", "content": f"{c('import-turn')} {EMAIL}"}}
    http.raw(
        "/api/v1/threads/import",
        json.dumps(header) + "\n" + json.dumps({"type": "node", "node": node}),
        "application/x-ndjson",
    )
    # Carl's thread: his turns, her message in it, his turn naming her, her among its participants.
    carl_main = f"carl-{agent}-main"
    http.call(
        "POST", "/api/v1/threads", {"id": carl_main, "user_id": CARL, "metadata": {"memoryUserIds": [CARL, PERSON]}}
    )
    http.call(
        "POST",
        f"/api/v1/threads/{carl_main}/entries",
        {
            "entries": [
                {"role": "user", "content": f"Carl here, {k('turn')}."},
                {"role": "user", "content": f"Ottília adds {c('msg-elsewhere')}", "metadata": {"userId": PERSON}},
                {"role": "user", "content": f"{k('mention')}: please call {NAME} on {PHONE}."},
            ]
        },
    )
    # A fork of her thread handed to Carl (it copies her turns and her thread's metadata).
    first = http.call("GET", f"/api/v1/threads/{rest}/path?limit=100")["results"][0]
    fork = f"carl-{agent}-fork"
    http.call("POST", f"/api/v1/threads/{rest}/fork", {"entry_id": first["id"], "new_thread_id": fork})
    http.call("POST", "/api/v1/threads", {"id": fork, "user_id": CARL}, status=(200,))
    http.call("POST", f"/api/v1/threads/{fork}/entries", {"role": "user", "content": f"Carl goes on, {k('fork-turn')}"})
    # Agent-wide items and facts naming her; an item about her; a fact of hers; Carl's own item.
    http.call(
        "POST",
        "/api/v1/items",
        {"kind": "fact", "subject": "Lisbon trip", "attribute": "organiser", "value": f"{NAME} ({EMAIL})"},
    )
    http.call(
        "POST",
        "/api/v1/items",
        {"kind": "fact", "subject": NAME, "attribute": "job", "value": f"travel agent {c('item-about')}"},
    )
    http.call("PUT", "/api/v1/facts/team/escalation", {"value": f"Escalate to {NAME} at {PHONE}"})
    http.call("PUT", f"/api/v1/facts/users/{person}/diet", {"value": c("user-fact")})
    http.call(
        "POST",
        "/api/v1/items",
        {"kind": "fact", "subject": "Carl", "attribute": "tea", "value": k("item"), "user_id": CARL},
    )
    # A project memory file and a context document naming her; a file of hers; one of Carl's.
    tool = "/api/v1/memory-tool"
    http.call(
        "POST",
        f"{tool}?project_id=p-trip",
        {"command": "create", "path": "/memories/trip.md", "file_text": f"Organiser: {NAME}, {EMAIL}\n"},
    )
    http.call(
        "PUT", "/api/v1/context-documents/AGENTS.md?project_id=p-trip", {"content": f"Bookings go to {NAME}, {PHONE}."}
    )
    http.call(
        "POST",
        f"{tool}?user_id={person}",
        {"command": "create", "path": "/memories/diary.md", "file_text": f"{c('user-file')}\n"},
    )
    http.call(
        "POST",
        f"{tool}?user_id={CARL}",
        {"command": "create", "path": "/memories/carl.md", "file_text": f"{k('file')}\n"},
    )
    # Reads that hit her rows (the access log): a search in her scope, a context build of her thread.
    http.call("POST", "/api/v1/search", {"text": f"{c('search-query')} {NAME}", "user_id": PERSON}, status=(200,))
    http.call(
        "POST", f"/api/v1/threads/{rest}/context", {"current_input": "where to?", "max_tokens": 2000}, status=(200,)
    )


def plant_in_process(agent: Agent, label: str) -> None:
    """What is written by the service's own jobs and staff: a compaction summary quoting her (the
    scripted model), and legal holds on her and her thread, lifted again."""
    rest = her_threads(label)["thread rest (" + label + ")"]
    thread = Thread.objects.get(agent=agent, external_id=rest)
    summary = f"Summary: {NAME} asked for help, {canary(label, 'summary')}."
    with use_model(ScriptedModel(lambda system, messages: summary)):
        compaction_now(thread=thread, strategy="summarize-old-preserve-recent", options={"preserve_recent_turns": 2})
    for hold in (
        legal_hold_place(reason="litigation 7", placed_by="staff:pat", agent=agent, user_id=PERSON),
        legal_hold_place(reason="litigation 7", placed_by="staff:pat", agent=agent, thread_external_id=rest),
    ):
        legal_hold_lift(hold=hold, lifted_by="staff:pat", reason="settled")


# --- the hunt --------------------------------------------------------------------------------------


# Columns where a dump taken before her erasure still reads her words with the live keys, and why
# (issue 25 §6: these columns are plaintext). Each would be in the receipt's backup statement
# ("readable"), which the test checks. Rows of others naming her (Carl's turn, agent-wide items and
# facts, the entity named after her, the project file and context document) are sealed under key
# sets holding her key (`key_people`), thread and entry metadata and sender names under her key
# (her fork's copied metadata too, handed to Carl), and items' subjects and metadata under the
# item's key as its value (SQL compares the subject's keyed hash, `subject_hash`): none is left.
SEALING_GAPS: dict[tuple[str, str], str] = {}
# Her canaries an old copy still reads through those gaps: none.
OWN_WORDS_STILL_READ: set[str] = set()


@dataclass
class Hunt:
    dump: str
    var_dir: Path
    # Rows of these agents are not hunted (an agent's forget leaves the other agents' rows).
    other_agent_ids: tuple[int, ...] = ()

    def dump_findings(self, wanted: dict[str, str]) -> dict[str, list[str]]:
        """{"dump table.column id=.. (what)": labels}: each value of each row, a sealed one opened
        with the keys live now (one no live key opens says nothing), and the dump besides its rows."""
        found: dict[str, list[str]] = {}
        others = {str(a) for a in self.other_agent_ids}
        for row in dump_rows(self.dump):
            if row.values.get("agent_id") in others:
                continue
            opened, _ = sealed_opened(row)
            what = row.values.get("action") or row.values.get("type") or row.values.get("kind") or ""
            for column, value in row.values.items():
                if value is None:
                    continue
                labels = found_in(opened.get(column, value), wanted)
                if row.table in KEPT_ON_PURPOSE:
                    labels = [label for label in labels if label not in KEPT_LABELS]
                if labels:
                    found[f"dump {row.table}.{column} id={row.values.get('id')} {what}".rstrip()] = labels
        if labels := found_in(dump_outside_copy(self.dump), wanted):
            found["dump outside rows"] = labels
        return found

    def findings(self, wanted: dict[str, str]) -> dict[str, list[str]]:
        """The dump's findings, and those of Redis and of the files under VAR_DIR (the server's log
        among them)."""
        found = self.dump_findings(wanted)
        for key, text in redis_texts().items():
            if labels := found_in(key + "\n" + text, wanted):
                found[f"redis {key}"] = labels
        for path, text in files_texts(self.var_dir, skip=lambda p: "pgdata" in p.parts).items():
            if labels := found_in(text, wanted):
                found[f"file {path}"] = labels
        return found

    def keeper_missing(self, agents: tuple[str, ...]) -> list[str]:
        text = self.dump.lower()
        return [keeper(a, p) for a in agents for p in CARL_PLACES if keeper(a, p) not in text]


@pytest.fixture
def var_dir(tmp_path: Path, settings: Any) -> Iterator[Path]:
    """VAR_DIR of the test process and of the gunicorn it starts: the exports, receipts' key,
    audit anchors and the server's log all land under it."""
    var = tmp_path / "var"
    var.mkdir()
    settings.VAR_DIR = var
    settings.EXPORT_DIR = var / "exports"
    settings.AUDIT_ANCHOR_FILE = var / "audit-anchors.log"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    yield var


@contextmanager
def planted(var: Path, callers: tuple[Caller, ...], labels: tuple[str, ...], env: dict[str, str]) -> Iterator[str]:
    """The service under gunicorn (VAR_DIR `var`) with her and Carl planted in each agent; yields
    its address, still serving."""
    environment = {"EXPORT_DIR": str(var / "exports"), "AUDIT_ANCHOR_FILE": str(var / "audit-anchors.log"), **env}
    with gunicorn_serving(var_dir=var, threads=4, env=environment) as where:
        base = f"http://{where}"
        for caller, label in zip(callers, labels, strict=True):
            plant(Http(base, caller.key), label)
        for caller, label in zip(callers, labels, strict=True):
            plant_in_process(caller.agent, label)
        yield base


def _erase(django_capture_on_commit_callbacks: Any) -> ErasureRequest:
    """A staff erasure request of every agent with her identifiers, run by its job."""
    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id=PERSON, identifiers=[EMAIL, PHONE, NAME], actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    return request


def test_a_staff_erasure_leaves_nothing_of_her_anywhere_and_carl_whole(
    transactional_db: None, alice: Caller, bob: Caller, var_dir: Path, django_capture_on_commit_callbacks: Any
) -> None:
    labels = ("a", "b")
    with planted(var_dir, (alice, bob), labels, {}):
        before = pg_dump(database_conninfo())
    assert not Hunt(before, var_dir).keeper_missing(labels)
    assert found_in(before, needles(labels)), "nothing of hers was planted"

    request = _erase(django_capture_on_commit_callbacks)

    hunt = Hunt(pg_dump(database_conninfo()), var_dir)
    found = hunt.findings(needles(labels))
    assert not found, json.dumps(found, indent=1)
    assert hunt.keeper_missing(labels) == []
    # The request keeps whom it was for, never the identifiers the officer typed.
    assert request.user_id == PERSON and request.identifiers == []


def test_an_agents_forget_with_identifiers_leaves_nothing_of_her_in_its_memory(
    transactional_db: None, alice: Caller, bob: Caller, var_dir: Path
) -> None:
    labels = ("a", "b")
    with planted(var_dir, (alice, bob), labels, {}) as base:
        # A staff export of her from every agent: a copy of alice's memory of her, on disk.
        export = export_request_create(user_id=PERSON, actor="staff:pat")
        export.refresh_from_db()
        assert export.archive_name, export.error
        archived = [
            path
            for path, text in files_texts(var_dir).items()
            if "exports" in path and canary("a", "rest-turn") in text
        ]
        assert archived, "the export archive holds her turn (the hunt opens archives)"
        Http(base, alice.key).call(
            "POST", f"/api/v1/users/{quote(PERSON, safe='')}/forget", {"identifiers": IDENTIFIERS}, status=(200,)
        )

    dump = pg_dump(database_conninfo())
    hunt = Hunt(dump, var_dir, other_agent_ids=(bob.agent.pk,))
    found = hunt.findings(needles(("a",)))
    assert not found, json.dumps(found, indent=1)
    assert hunt.keeper_missing(labels) == []
    # Bob's memory of her is his to forget: whole.
    stored = (
        "rest-turn",
        "mcp-turn",
        "import-turn",
        "msg-elsewhere",
        "item-about",
        "user-fact",
        "user-file",
        "summary",
    )
    assert [p for p in stored if canary("b", p) not in dump] == []


def test_a_dump_taken_before_the_erasure_opened_with_the_live_keys_yields_none_of_her_words(
    encrypted: Any,  # noqa: F811  (the fixture imported above; first, so it is torn down after the database)
    transactional_db: None,
    alice: Caller,
    bob: Caller,
    var_dir: Path,
    django_capture_on_commit_callbacks: Any,
) -> None:
    labels = ("a", "b")
    env = {"MEMORY_ENCRYPTION_KEYS": K1, "MEMORY_KEYSTORE_DIR": str(encrypted.MEMORY_KEYSTORE_DIR)}
    with planted(var_dir, (alice, bob), labels, env):
        before = pg_dump(database_conninfo())
    # Her words: what she said and what was said of her (her ids and thread ids are the rows'
    # keys, which the receipt says a backup keeps in plaintext).
    words = {label: needle for label, needle in needles(labels).items() if label.startswith("canary")}
    words |= {label: HER_IDS[label] for label in ("name", "name folded", "surname", "e-mail", "phone", "phone digits")}
    request = _erase(django_capture_on_commit_callbacks)

    found = Hunt(before, var_dir).dump_findings(words)
    backup = request.report["crypto_shredding"]["backup"]
    readable = {(r["table"], r["column"]) for r in backup["readable"]}
    columns = {tuple(where.split()[1].split(".", 1)) for where in found}
    # The receipt names every column where the old copy still reads her words: it claims no more
    # than is true.
    assert columns <= readable, json.dumps({"found": found, "backup": backup}, indent=1)
    # What her key's destruction does not reach yet (columns kept plaintext, rows of others sealed
    # under their key): nothing beyond these. Her own turns, tool results, summary, facts and
    # files open with no key (none of their canaries is found).
    assert columns <= set(SEALING_GAPS), json.dumps({"found": found, "backup": backup}, indent=1)
    opened = {label for labels in found.values() for label in labels}
    own = {f"canary {p} ({a})" for a in labels for p in PLACES if p not in OWN_WORDS_STILL_READ}
    assert not opened & own, sorted(opened & own)
