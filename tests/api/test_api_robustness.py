"""Bad input never reaches a 500: each case below was one, found by fuzzing the live API.

Every answer is a 4xx in the error shape naming the field where there is one, and nothing was
written. Bodies are sent as raw bytes, as a client would: `json.dumps` writes NUL and lone
surrogates as `\\u` escapes, which is how they arrive over the wire.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from django.test import Client

from governance.models import AuditRecord
from memoryapp.models import Entry, MemoryFileVersion, MemoryItem, Thread
from tests.kit.api import Caller, error_of, jsonl_node, post_entry, post_item, post_thread

pytestmark = pytest.mark.django_db

LONE_SURROGATE = "\ud800"
NUL = "\u0000"


def _cursor(**extra: Any) -> str:
    """A thread-list cursor as a client could forge it."""
    values = {"u": "2026-01-01T00:00:00+00:00", "i": 1, **extra}
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def send(caller: Caller, method: str, url: str, body: Any = None, *, raw: bytes | None = None, ctype: str = "") -> Any:
    """A request with a JSON body encoded by `json.dumps` (escapes kept), or raw bytes."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    return getattr(caller.client, method)(url, data=data, content_type=ctype or "application/json")


def thread_with_entry(caller: Caller, thread_id: str = "t-robust") -> tuple[str, str]:
    post_thread(caller, thread_id, status=201, user_id="u-ana")
    return thread_id, post_entry(caller, thread_id, role="user", content="I live in Lisbon.")["id"]


def counts() -> tuple[int, int, int, int, int]:
    return (
        Thread.objects.count(),
        Entry.objects.count(),
        MemoryItem.objects.count(),
        MemoryFileVersion.objects.count(),
        AuditRecord.objects.count(),
    )


# --- text the database cannot keep ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url", "body", "field"),
    [
        ("post", "/api/v1/threads", {"id": "t-new", "metadata": {"note": LONE_SURROGATE}}, "metadata.note"),
        ("patch", "/api/v1/threads/t-robust", {"metadata": {"a": [1, LONE_SURROGATE]}}, "metadata.a[1]"),
        ("post", "/api/v1/threads/t-robust/entries", {"role": "user", "content": LONE_SURROGATE}, "content"),
        (
            "post",
            "/api/v1/threads/t-robust/entries",
            {"entries": [{"role": "user", "content": "fine"}, {"role": "user", "sender_name": LONE_SURROGATE}]},
            "entries[1].sender_name",
        ),
        ("post", "/api/v1/items", {"kind": LONE_SURROGATE, "subject": "s", "attribute": "a", "value": "v"}, "kind"),
        ("post", "/api/v1/search", {"text": "Lisbon", "method": LONE_SURROGATE}, "method"),
        ("post", "/api/v1/threads/t-robust/context", {"max_tokens": 500, "strategy": LONE_SURROGATE}, "strategy"),
        ("put", "/api/v1/facts/users/u-ana/city", {"value": {"name": LONE_SURROGATE}}, "value.name"),
        ("post", "/api/v1/memory-tools", {"name": LONE_SURROGATE, "input": {}, "user_id": "u"}, "name"),
        ("post", "/api/v1/memory-tool", {"command": "create", "path": "/memories/" + LONE_SURROGATE}, "path"),
        ("post", "/api/v1/working-note", {"action": "append", "content": LONE_SURROGATE}, "content"),
        ("post", "/api/v1/threads/t-robust/compact", {"strategy": LONE_SURROGATE}, "strategy"),
        ("post", "/api/v1/threads/import", {"id": LONE_SURROGATE, "records": []}, "id"),
    ],
)
def test_a_lone_surrogate_anywhere_in_a_body_is_a_400_naming_its_field(
    alice: Caller, method: str, url: str, body: dict[str, Any], field: str
) -> None:
    thread_with_entry(alice)
    before = counts()
    error = error_of(send(alice, method, url, body))
    assert (error["code"], error["field"]) == ("invalid_text", field)
    assert counts() == before


def test_a_lone_surrogate_in_a_key_names_the_object_holding_it(alice: Caller) -> None:
    thread_with_entry(alice)
    error = error_of(send(alice, "patch", "/api/v1/threads/t-robust", {"metadata": {LONE_SURROGATE: 1}}))
    assert (error["code"], error["field"]) == ("invalid_text", "metadata")


def test_a_surrogate_pair_is_one_character_and_is_kept(alice: Caller) -> None:
    thread_with_entry(alice)
    # json.dumps writes the emoji as the pair \ud83d\ude00: the parser must not take it for two halves.
    response = send(alice, "post", "/api/v1/threads/t-robust/entries", {"role": "user", "content": "smile \U0001f600"})
    assert response.status_code == 201, response.content
    assert Entry.objects.get(pk=response.json()["id"]).content == "smile \U0001f600"


@pytest.mark.parametrize(
    ("method", "url", "body", "field"),
    [
        ("post", "/api/v1/threads/t-robust/entries", {"role": "user", "content": "a" + NUL + "b"}, "content"),
        (
            "post",
            "/api/v1/threads/t-robust/entries",
            {"role": "user", "content": "x", "metadata": {"k": NUL}},
            "metadata.k",
        ),
        (
            "post",
            "/api/v1/threads/t-robust/entries",
            {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "name": "f", "input": {"q": NUL}}]},
            "tool_calls[0].input.q",
        ),
        ("post", "/api/v1/threads", {"id": "t-new", "metadata": {"deep": {"er": NUL}}}, "metadata.deep.er"),
        ("patch", "/api/v1/threads/t-robust", {"metadata": {"k": NUL}}, "metadata.k"),
        (
            "post",
            "/api/v1/items",
            {"kind": "fact", "subject": "s", "attribute": "a", "value": "v", "metadata": {"k": NUL}},
            "metadata.k",
        ),
        ("post", "/api/v1/search", {"text": "a" + NUL}, "text"),
    ],
)
def test_nul_in_a_body_is_a_400_naming_its_field_and_writes_nothing(
    alice: Caller, method: str, url: str, body: dict[str, Any], field: str
) -> None:
    thread_with_entry(alice)
    before = counts()
    error = error_of(send(alice, method, url, body))
    assert (error["code"], error["field"]) == ("invalid_text", field)
    assert counts() == before
    assert Thread.objects.get(external_id="t-robust").metadata == {}


def test_nul_in_a_memory_file_is_still_answered_by_the_tool_with_its_text(alice: Caller) -> None:
    # The memory tool's views parse NUL through: the tool's own answer carries `result` for the model.
    response = send(
        alice, "post", "/api/v1/memory-tool", {"command": "create", "path": "/memories/a.md", "file_text": NUL}
    )
    error = error_of(response)
    assert error["field"] == "file_text"
    assert response.json()["result"] == "Error: Parameter `file_text` must not contain NUL characters."
    assert not MemoryFileVersion.objects.exists()


def test_nul_in_a_models_memory_tool_input_is_a_tool_error_the_model_reads(alice: Caller) -> None:
    body = {"name": "remember", "input": {"key": "ci" + NUL + "ty", "value": "Lisbon"}, "user_id": "u-ana"}
    response = send(alice, "post", "/api/v1/memory-tools", body)
    assert response.status_code == 200, response.content
    assert response.json()["is_error"] is True
    assert not MemoryItem.objects.exists()


def test_nul_in_the_metadata_filter_of_the_thread_list_names_it(alice: Caller) -> None:
    thread_with_entry(alice)
    response = alice.client.get("/api/v1/threads", {"metadata": json.dumps({"k": NUL})})
    assert (error_of(response)["field"]) == "metadata.k"


def test_nul_in_a_query_parameter_is_a_400_naming_it(alice: Caller) -> None:
    _, entry_id = thread_with_entry(alice)
    error = error_of(alice.client.get("/api/v1/memory-files", {"place": entry_id + NUL}))
    assert (error["code"], error["field"]) == ("invalid_text", "place")
    error = error_of(alice.client.get("/api/v1/threads", {"user_id": "u" + NUL}))
    assert error["field"] == "user_id"


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/threads/t-robust%00",
        "/api/v1/threads/t%00/entries",
        "/api/v1/entries/ent_%00",
        "/api/v1/items/mem_%00",
        "/api/v1/items/mem_%00/history",
        "/api/v1/memory-files/versions/mfv_%00",
        "/api/v1/tool-results/ent_%00",
    ],
)
def test_nul_in_a_path_names_nothing_and_answers_404(alice: Caller, url: str) -> None:
    thread_with_entry(alice)
    assert error_of(alice.client.get(url), 404)["code"] == "not_found"


def test_nul_in_an_admin_url_is_refused_before_the_database(admin_client: Client) -> None:
    assert admin_client.get("/admin/memoryapp/thread/", {"q": "a" + NUL}).status_code == 400
    assert admin_client.get("/admin/memoryapp/thread/1%00/change/").status_code == 404


# --- JSON that strict parsing must refuse -----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "raw"),
    [
        ("/api/v1/threads", b"[" * 100_000 + b"]" * 100_000),
        ("/api/v1/threads/t-robust/entries", b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
        ("/api/v1/items", b"[" * 100_000 + b"]" * 100_000),
        ("/api/v1/memory-tool", b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
        ("/api/v1/threads/import", b"[" * 100_000 + b"]" * 100_000),
        ("/api/v1/items/mem_x/forget", b"[" * 100_000 + b"]" * 100_000),
    ],
)
def test_a_body_nested_too_deeply_is_malformed_json(alice: Caller, url: str, raw: bytes) -> None:
    thread_with_entry(alice)
    before = counts()
    assert error_of(send(alice, "post", url, raw=raw))["code"] == "malformed_json"
    assert counts() == before


@pytest.mark.parametrize(
    "raw",
    [
        b'{"role": "user", "content": "x", "token_count": 1e999}',
        b'{"role": "user", "content": "x", "token_count": NaN}',
        b'{"role": "user", "content": "\xff\xfe"}',
        b'{"role": "user", "content": "x", "token_count": 1' + b"0" * 5000 + b"}",
    ],
)
def test_numbers_json_cannot_write_back_and_bytes_that_are_not_utf8_are_malformed(alice: Caller, raw: bytes) -> None:
    thread_with_entry(alice)
    before = counts()
    assert error_of(send(alice, "post", "/api/v1/threads/t-robust/entries", raw=raw))["code"] == "malformed_json"
    assert counts() == before


def test_forget_with_a_body_that_is_not_an_object_is_a_400(alice: Caller) -> None:
    item = post_item(alice, kind="fact", subject="Ana", attribute="city", value="Lisbon")
    for raw in (b"1000000000000000000000000000000", b"[1]", b'"x"'):
        assert error_of(send(alice, "post", f"/api/v1/items/{item['id']}/forget", raw=raw))["code"] == "invalid_value"
    assert MemoryItem.objects.get(pk=item["id"]).status == item["status"]


# --- times the database would keep but never give back -----------------------------------------------


@pytest.mark.parametrize("created_at", ["2020-02-30T00:00:00Z", "2020-13-45T25:61:00"])
def test_a_created_at_shaped_like_a_time_but_naming_no_day_is_a_400(alice: Caller, created_at: str) -> None:
    thread_with_entry(alice)
    body = {"entries": [{"role": "user", "content": "x", "created_at": created_at}]}
    error = error_of(send(alice, "post", "/api/v1/threads/t-robust/entries", body))
    assert error["field"] == "entries[0].created_at"
    assert Entry.objects.count() == 1


@pytest.mark.parametrize("created_at", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00"])
def test_a_created_at_outside_years_1_to_9999_in_utc_is_refused_and_the_thread_stays_readable(
    alice: Caller, created_at: str
) -> None:
    thread_with_entry(alice)
    error = error_of(
        send(
            alice,
            "post",
            "/api/v1/threads/t-robust/entries",
            {"role": "user", "content": "x", "created_at": created_at},
        )
    )
    assert error["field"] == "created_at"
    assert Entry.objects.count() == 1
    # Before the check, such a row was written and every later read of the thread failed.
    assert alice.client.get("/api/v1/threads/t-robust/entries").status_code == 200
    assert alice.client.get("/api/v1/threads/t-robust/export").status_code == 200


# --- the JSONL import ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "code", "field"),
    [
        (b"\xff\xfe\n", "malformed_json", None),
        (b"[" * 5000 + b"]" * 5000 + b"\n", "malformed_jsonl", "line 1"),
        (
            jsonl_node("ent_imp1", turn={"role": "user", "content": LONE_SURROGATE}).encode(),
            "invalid_text",
            "line 1.node.turn.content",
        ),
        (
            jsonl_node("ent_imp1", createdAtIso="9999-12-31T23:59:59-05:00").encode(),
            "invalid_value",
            "line 1.createdAt",
        ),
        (jsonl_node("ent_imp1", seq=10**30).encode(), "invalid_value", "line 1.seq"),
    ],
)
def test_a_jsonl_import_with_a_bad_line_names_it_and_creates_no_thread(
    alice: Caller, raw: bytes, code: str, field: str | None
) -> None:
    response = send(alice, "post", "/api/v1/threads/import?id=t-imported", raw=raw, ctype="application/x-ndjson")
    error = error_of(response)
    assert (error["code"], error.get("field")) == (code, field)
    assert not Thread.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"id": "t-imp", "records": "not a list"}, "records"),
        ({"id": "t-imp", "jsonl": 7}, "jsonl"),
        ({"colour": 1}, "colour"),
    ],
)
def test_the_json_form_of_an_import_checks_its_fields(alice: Caller, body: dict[str, Any], field: str) -> None:
    assert error_of(send(alice, "post", "/api/v1/threads/import", body))["field"] == field
    assert not Thread.objects.exists()


# --- numbers, cursors, routes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "params", "field"),
    [
        ("/api/v1/threads", {"limit": str(10**30)}, "limit"),
        ("/api/v1/threads", {"limit": "-1"}, "limit"),
        ("/api/v1/threads/t-robust/entries", {"limit": "-1"}, "limit"),
        ("/api/v1/threads/t-robust/entries", {"before": "yesterday"}, "before"),
        ("/api/v1/threads/t-robust/path", {"limit": str(10**30)}, "limit"),
        ("/api/v1/items", {"limit": str(-(10**30))}, "limit"),
        ("/api/v1/facts/users/u-ana", {"q": "x", "limit": str(10**30)}, "limit"),
        ("/api/v1/threads", {"cursor": "eyJ1IjoiMDAwMS0wMS0wMVQwMDowMDowMCswNTowMCIsImkiOjF9"}, "cursor"),
        ("/api/v1/threads", {"colour": "red"}, "colour"),
        ("/api/v1/threads", {"cursor": _cursor(f={"metadata": {"a": NUL}})}, "cursor"),
        ("/api/v1/threads", {"cursor": _cursor(f={"user_id": LONE_SURROGATE})}, "cursor"),
        ("/api/v1/threads", {"cursor": _cursor(f={"after": "0001-01-01T00:00:00+05:00"})}, "cursor"),
        ("/api/v1/threads", {"cursor": _cursor(h=5)}, "cursor"),
        ("/api/v1/threads/t-robust/entries", {"after": "9999-12-31T23:59:59-05:00"}, "after"),
    ],
)
def test_out_of_range_numbers_and_unknown_parameters_name_the_parameter(
    alice: Caller, url: str, params: dict[str, str], field: str
) -> None:
    thread_with_entry(alice)
    response = alice.client.get(url, params)
    if field == "cursor" and response.status_code == 200:
        # A cursor this service could have written (a time and an id): an empty page is a fine answer.
        assert response.json()["results"] == []
        return
    assert error_of(response)["field"] == field


@pytest.mark.parametrize(
    "cursor",
    [
        "eyJ1IjpudWxsLCJpIjpudWxsfQ",
        "eyJ1IjoiMjAyMC0wMS0wMVQwMDowMDowMFoiLCJpIjoxMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDB9",
        "%%%",
        "W10",
    ],
)
def test_a_forged_cursor_is_a_400_or_an_empty_page_never_a_500(alice: Caller, cursor: str) -> None:
    thread_with_entry(alice)
    for url in ("/api/v1/threads", "/api/v1/threads/t-robust/entries", "/api/v1/items"):
        response = alice.client.get(url, {"cursor": cursor})
        assert response.status_code in (200, 400), (url, response.content)
        if response.status_code == 400:
            assert response.json()["error"]["field"] == "cursor"


def test_an_unknown_route_under_the_api_answers_404_in_the_error_shape(alice: Caller) -> None:
    for url in ("/api/v1/nothing-here", "/api/v1/threads/a/b/c/d", "/api/v1/entries/x/unknown"):
        assert error_of(alice.client.get(url), 404)["code"] == "not_found"


def test_the_schema_states_the_bearer_key_and_the_bodies_a_fuzzer_generates_from(client: Client) -> None:
    schema = client.get("/api/schema/", {"format": "json"}).json()
    assert schema["components"]["securitySchemes"]["agentKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An agent key: Authorization: Bearer mk_...",
    }
    paths = schema["paths"]
    for path, method in [
        ("/api/v1/threads", "post"),
        ("/api/v1/threads/{thread_id}", "patch"),
        ("/api/v1/threads/{thread_id}/fork", "post"),
        ("/api/v1/search", "post"),
        ("/api/v1/threads/{thread_id}/context", "post"),
        ("/api/v1/threads/{thread_id}/compact", "post"),
    ]:
        assert "requestBody" in paths[path][method], (path, method)
    listed = {p["name"] for p in paths["/api/v1/threads"]["get"]["parameters"]}
    assert {"limit", "cursor", "metadata", "user_id"} <= listed


def test_a_json_body_past_32_mib_is_refused_before_it_is_parsed(alice: Caller) -> None:
    raw = b'{"kind": "fact", "subject": "s", "attribute": "a", "value": "' + b"x" * (32 * 1024 * 1024) + b'"}'
    error = error_of(send(alice, "post", "/api/v1/items", raw=raw), 413)
    assert error["code"] == "request_too_large"
    assert not MemoryItem.objects.exists()


# --- two requests racing past a service's check ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_import_racing_another_writer_of_its_thread_is_a_409_not_a_500(alice: Caller) -> None:
    """The import checks that its thread is new, then creates it; a writer between the two used to
    make the import insert into that thread, hit the (thread, seq) constraint and answer 500.

    The interleaving is forced: this test's transaction holds the new thread while the import
    waits on its row lock, then adds an entry of seq 1 and commits.
    """
    import threading

    from django.db import connection, connections, transaction

    from memoryapp.threads.services import entry_add, thread_create

    answers: list[Any] = []

    def import_in_background() -> None:
        node = {"id": "ent_race1", "parent": None, "seq": 1, "turn": {"role": "user", "content": "imported"}}
        try:
            answers.append(
                send(
                    alice,
                    "post",
                    "/api/v1/threads/import",
                    {"id": "t-race", "records": [{"type": "node", "node": node}]},
                )
            )
        finally:
            connections.close_all()

    with transaction.atomic():
        thread = thread_create(agent=alice.agent, external_id="t-race")
        importer = threading.Thread(target=import_in_background)
        importer.start()
        with connection.cursor() as cursor:
            for _ in range(2000):  # until the import waits for this transaction (a lock not granted)
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    break
                importer.join(0.01)
        entry_add(thread=thread, role="user", content="written first")
    importer.join(60)
    assert answers and answers[0].status_code == 409, answers[0].content if answers else "no answer"
    assert answers[0].json()["error"]["code"] in ("conflict", "thread_exists")
    assert list(Entry.objects.filter(thread__external_id="t-race").values_list("text", flat=True)) == ["written first"]


# --- the admin's own inputs ------------------------------------------------------------------------------


def test_the_what_did_it_know_page_reads_a_time_past_year_9999_in_utc_as_unreadable(
    admin_client: Client, alice: Caller
) -> None:
    for at in ("9999-12-31T23:59:59-05:00", "0001-01-01T00:00+05:00"):
        response = admin_client.get("/admin/memoryapp/memoryitem/known/", {"agent": alice.agent.pk, "at": at})
        assert response.status_code == 200  # was an OverflowError
        assert "The time is not one I can read" in response.content.decode()


@pytest.mark.parametrize(
    "form",
    [
        {"action": "approve", "item": "mem_" + NUL},
        {"action": "reject", "item": "ITEM", "reason": "wrong" + NUL},
        {"action": "bulk_approve", "selected": [NUL, "ITEM"]},
    ],
)
def test_a_nul_in_a_review_form_is_a_400_and_decides_nothing(
    admin_client: Client, alice: Caller, form: dict[str, Any]
) -> None:
    body = {"kind": "fact", "subject": "Ana", "attribute": "city", "value": "Lisbon"}
    item_id = post_item(alice, **body)["id"]
    audits = AuditRecord.objects.count()
    filled = {
        k: ([item_id if x == "ITEM" else x for x in v] if isinstance(v, list) else v.replace("ITEM", item_id))
        for k, v in form.items()
    }
    assert admin_client.post("/admin/memoryapp/memoryitem/review/", filled).status_code == 400  # was a DataError 500
    assert MemoryItem.objects.get(pk=item_id).status == "suggested"
    assert AuditRecord.objects.count() == audits
