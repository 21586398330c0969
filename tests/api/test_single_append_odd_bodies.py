"""Odd single appends (bytes that are not UTF-8, a body that is no object, numbers past a float or
past Python's digits, duplicate keys, a charset in the Content-Type, a refused secret) get the same
answer, audit records and rows from the path past DRF (memoryapp.api.threads._single_append) as from
DRF's view, and never a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest

from governance.models import AuditRecord
from memoryapp.api import threads as threads_api
from memoryapp.models import Entry
from tests.kit.api import THREADS, Caller, post_ok

VOLATILE = ("id", "seq", "parent_id", "content_hash", "created_at")
JSON = "application/json"


def _answer(response: Any) -> tuple[int, dict[str, str], Any]:
    headers = {name: value for name, value in response.items() if name != "Content-Length"}
    body = json.loads(response.content) if response.content else None
    if isinstance(body, dict):
        body = {name: value for name, value in body.items() if name not in VOLATILE}
    return response.status_code, headers, body


CASES: dict[str, tuple[bytes, str]] = {
    "not utf-8": (b'{"role": "user", "content": "\xff\xfe"}', JSON),
    "latin-1 declared": ('{"role": "user", "content": "café"}'.encode("latin-1"), "application/json; charset=latin-1"),
    "utf-8 declared": ('{"role": "user", "content": "café"}'.encode(), "application/json; charset=utf-8"),
    "an array": (b'[{"role": "user", "content": "x"}]', JSON),
    "null": (b"null", JSON),
    "digits past python's limit": (
        ('{"role": "user", "content": "x", "metadata": {"n": ' + "9" * 5000 + "}}").encode(),
        JSON,
    ),
    "a float past double": (b'{"role": "user", "content": "x", "metadata": {"n": 1e999}}', JSON),
    "duplicate keys": (b'{"role": "user", "role": "assistant", "content": "x"}', JSON),
    "a byte order mark": (b'\xef\xbb\xbf{"role": "user", "content": "x"}', JSON),
    "a secret refused": (b'{"role": "user", "content": "token ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"}', JSON),
    "entries not a list": (b'{"entries": "x"}', JSON),
    "upper-case media type": (b'{"role": "user", "content": "x"}', "Application/JSON"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_odd_body_is_answered_as_drf_answers_it(alice: Caller, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    post_ok(alice.client, THREADS, {"id": "t-one"})
    post_ok(alice.client, f"{THREADS}/t-one/entries", {"role": "user", "content": "first"})  # the key is cached
    data, content_type = CASES[case]
    url = f"{THREADS}/t-one/entries"

    def sent() -> tuple[Any, tuple[int, int]]:
        audits, entries = AuditRecord.objects.count(), Entry.objects.count()
        response = alice.client.generic("POST", url, data, content_type=content_type)
        return response, (AuditRecord.objects.count() - audits, Entry.objects.count() - entries)

    fast, fast_rows = sent()
    monkeypatch.setattr(threads_api, "_single_append", lambda *args: None)
    drf, drf_rows = sent()

    assert _answer(fast) == _answer(drf)
    assert fast_rows == drf_rows
    assert fast.status_code < 500
