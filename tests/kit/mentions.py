"""One person (Inês Valdomiro, `u-ines`) named by e-mail, phone and name in rows that are not
hers, planted over the agent API: what the erasure of her mentions must reach (issue 25 §4)."""

from __future__ import annotations

from typing import Any

from django.db import connection

from tests.kit.api import Caller, create_memory_file, post_entry, post_item, post_ok, post_thread

PERSON = "u-ines"
EMAIL = "ines.valdomiro@example.org"
PHONE = "+351 912 345 678"
NAME = "Inês Valdomiro"
IDENTIFIERS = {"emails": [EMAIL], "phones": [PHONE], "names": [NAME]}
# What must not stay anywhere once she is erased: as written, and as stored by other paths.
NEEDLES = ("valdomiro", EMAIL, "912 345 678", "912345678")
# Another person's words that must stay whole.
CARL_SAYS = "Carl prefers green tea in the mornings."


def her_thread(caller: Caller, said: str = "I booked the flights myself.") -> None:
    """Her own thread (`t-ines`, about her) with one turn of hers."""
    post_thread(caller, "t-ines", user_id=PERSON)
    post_entry(caller, "t-ines", role="user", content=said)


def plant(caller: Caller) -> dict[str, Any]:
    """Her own thread, and her mentions in: another person's turn and thread metadata (with a
    participants list naming her), an agent-wide item, an item about her (its entity), a fact, a
    project memory file, a project context document, and a fork of a thread naming her copied to
    another owner."""
    post_thread(caller, "t-ines", user_id=PERSON)
    post_entry(caller, "t-ines", role="user", content="I booked the flights myself.")
    post_thread(caller, "t-carl", user_id="u-carl", metadata={"memoryUserIds": ["u-carl", PERSON], "contact": EMAIL})
    post_entry(caller, "t-carl", role="user", content=CARL_SAYS)
    turn = post_entry(
        caller, "t-carl", role="user", content=f"Please call {NAME} on {PHONE} or write to {EMAIL} about the trip."
    )
    post_entry(caller, "t-carl", role="assistant", content=f"I will contact {NAME} today.")
    post_item(caller, kind="fact", subject="Lisbon trip", attribute="organiser", value=f"{NAME} ({EMAIL}) organises it")
    post_item(caller, kind="fact", subject=NAME, attribute="job", value="travel agent in Porto")
    fact = caller.client.put(
        "/api/v1/facts/team/escalation", {"value": f"Escalate to {NAME} at {PHONE}"}, format="json"
    )
    assert fact.status_code in (200, 201), fact.content
    create_memory_file(
        caller, "/memories/trip.md", f"# Trip\nOrganiser: {NAME}, {EMAIL}\n", "/api/v1/memory-tool?project_id=p-trip"
    )
    document = caller.client.put(
        "/api/v1/context-documents/AGENTS.md?project_id=p-trip",
        {"content": f"Questions about bookings go to {NAME}, {PHONE}."},
        format="json",
    )
    assert document.status_code in (200, 201), document.content
    post_thread(caller, "t-team", user_id="u-carl", metadata={"organiser": NAME, "phone": PHONE})
    first = post_entry(caller, "t-team", role="user", content="The team meets on Monday.")
    post_ok(caller.client, "/api/v1/threads/t-team/fork", {"entry_id": first["id"], "new_thread_id": "t-team-dora"})
    post_thread(caller, "t-team-dora", user_id="u-dora", status=200)
    return {"turn": turn}


def rows_naming_her(agent_id: int | None = None) -> dict[str, int]:
    """Every table of the database, searched with SQL over each row's JSON text: the rows holding
    one of her identifiers (of this agent only, when the table has an agent_id and one is given)."""
    found: dict[str, int] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        )
        tables = [row[0] for row in cursor.fetchall()]
        for table in tables:
            cursor.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_name = %s AND column_name = 'agent_id'", [table]
            )
            scoped = agent_id is not None and cursor.fetchone() is not None
            where = " AND ".join(["(" + " OR ".join(["row_to_json(t)::text ILIKE %s"] * len(NEEDLES)) + ")"])
            params: list[Any] = [f"%{n}%" for n in NEEDLES]
            if scoped:
                where += " AND t.agent_id = %s"
                params.append(agent_id)
            cursor.execute(f'SELECT count(*) FROM "{table}" t WHERE {where}', params)
            n = cursor.fetchone()[0]
            if n:
                found[table] = n
    return found
