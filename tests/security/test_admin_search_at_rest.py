"""The admin's search boxes with encryption on: entries are found by the words of their sealed text
through the blind index (the full-text column is empty for them), threads by their ids as before."""

from __future__ import annotations

import re
from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from governance.crypto.envelope import data_keys_forget
from memoryapp.models import Agent, Entry
from memoryapp.search.websearch import MAX_TYPED_WORDS, typed_groups
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.api import Caller


def _listed(admin_client: Client, query: str) -> set[str]:
    response = admin_client.get("/admin/memoryapp/entry/", {"q": query})
    assert response.status_code == 200
    found = re.findall(
        r'<th class="field-entry_link"><a href="/admin/memoryapp/entry/([^/]+)/change/', response.content.decode()
    )
    return {pk.replace("_5F", "_") for pk in found}


def test_the_admin_entry_search_finds_sealed_texts_through_the_blind_index(
    encrypted: Any, db: None, admin_client: Client, alice: Caller, bob: Caller
) -> None:
    food = thread_create(agent=alice.agent, external_id="food", user_id="u-ana")
    ill = entry_add(thread=food, role="user", content="Shellfish makes me ill, so no prawns please.")
    sea = entry_add(thread=food, role="assistant", content="Noted: nothing from the sea.")
    cabins = entry_add(thread=food, role="user", content="We rented two cabins by the Zanzibarquill lake")
    bobs = entry_add(
        thread=thread_create(agent=bob.agent, external_id="dinner", user_id="u-bo"),
        role="user",
        content="Prawns again, please",
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FILTER (WHERE length(search_vector) > 0) FROM memoryapp_entry")
        assert cursor.fetchone() == (0,)

    assert _listed(admin_client, "shellfish") == {ill.id}
    assert _listed(admin_client, "Zanzibarquill cabin") == {cabins.id}  # plural and case folded
    assert _listed(admin_client, "prawns") == {ill.id, bobs.id}  # each agent's words under its own key
    assert _listed(admin_client, '"no prawns"') == {ill.id}
    assert _listed(admin_client, "prawns -shellfish") == {bobs.id}
    assert _listed(admin_client, "shellfish or sea") == {ill.id, sea.id}
    assert _listed(admin_client, cabins.id) == {cabins.id}
    assert _listed(admin_client, "zebra") == set()
    assert _listed(admin_client, '" "') == set()

    with CaptureQueriesContext(connection) as captured:
        _listed(admin_client, "shellfish")
    sql = [q["sql"] for q in captured.captured_queries]
    assert any('"keyword_hashes" @>' in q for q in sql)
    assert not any("websearch_to_tsquery" in q or "search_vector" in q for q in sql)
    assert Entry.objects.filter(keyword_hashes__isnull=True).count() == 0


def test_the_admin_thread_search_finds_threads_by_their_ids_with_encryption_on(
    encrypted: Any, db: None, admin_client: Client, alice: Caller, bob: Caller
) -> None:
    entry_add(thread=thread_create(agent=alice.agent, external_id="rome", user_id="u-ana"), role="user", content="hi")
    thread_create(agent=bob.agent, external_id="paris", user_id="u-bo")

    for query, shown, hidden in [("rome", "rome", "paris"), ("u-bo", "paris", "rome"), ("alice", "rome", "paris")]:
        page = admin_client.get("/admin/memoryapp/thread/", {"q": query}).content.decode()
        assert f">{shown}<" in page and f">{hidden}<" not in page, query


LONG_PHRASE = '"' + " ".join(f"w{n}x" for n in range(3000)) + '"'
ODD_SEARCHES = [
    LONG_PHRASE,
    '"no prawns',
    "-prawns",
    "or",
    "or or -",
    "--",
    '"',
    '-""',
    "prawns " * 3000,
    "x" * 5000,
    "a|b&!c:*",
]


def test_the_admin_entry_search_answers_odd_syntax_with_encryption_on(
    encrypted: Any, db: None, admin_client: Client, alice: Caller, bob: Caller
) -> None:
    ill = entry_add(
        thread=thread_create(agent=alice.agent, external_id="food", user_id="u-ana"),
        role="user",
        content="Shellfish makes me ill, so no prawns please.",
    )
    bobs = entry_add(
        thread=thread_create(agent=bob.agent, external_id="dinner", user_id="u-bo"), role="user", content="Sushi"
    )
    for query in ODD_SEARCHES:
        _listed(admin_client, query)  # 200, whatever the syntax
    assert _listed(admin_client, '"no prawns') == {ill.id}  # the closing quote may be missing
    assert _listed(admin_client, "-prawns") == {bobs.id}
    assert _listed(admin_client, "or") == set()


def test_the_admin_entry_search_answers_odd_syntax_with_encryption_off(
    db: None, admin_client: Client, alice: Caller
) -> None:
    entry_add(thread=thread_create(agent=alice.agent, external_id="food"), role="user", content="No prawns please.")
    for query in ODD_SEARCHES:
        _listed(admin_client, query)


def test_a_typed_search_counts_so_many_words_however_long_its_phrases() -> None:
    words = [w for group in typed_groups(LONG_PHRASE + " prawns -shellfish") for term in group for w in term.words]
    assert len(words) == MAX_TYPED_WORDS  # the phrase's first words; the terms after it are over the count
    assert words[:2] == ["w0x", "w1x"]
    assert [t.words for g in typed_groups('"no prawns" -sea or ill') for t in g] == [
        ("no", "prawn"),
        ("sea",),
        ("ill",),
    ]


def test_the_admin_entry_search_reads_every_agents_blind_key_in_one_query(
    encrypted: Any, db: None, admin_client: Client, alice: Caller
) -> None:
    def counted() -> int:
        data_keys_forget()  # a process's first search: no key cached
        with CaptureQueriesContext(connection) as captured:
            _listed(admin_client, "zebra")  # no row shown: what is counted is the search's
        return len(captured.captured_queries)

    entry_add(thread=thread_create(agent=alice.agent, external_id="a"), role="user", content="prawns")
    one = counted()
    for n in range(4):
        agent = Agent.objects.create(slug=f"more-{n}", name=f"more {n}")
        entry_add(thread=thread_create(agent=agent, external_id="b"), role="user", content="prawns")
    assert counted() == one
    assert len(_listed(admin_client, "prawns")) == 5
