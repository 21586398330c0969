"""A single append without a run is answered past DRF's request handling
(memoryapp.api.threads._single_append): the same answer as DRF's view gives, every error included,
and anything else (a batch, a run, another Accept, a key not checked yet) still through DRF."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.views import APIView

from memoryapp.api import threads as threads_api
from memoryapp.models import Entry
from tests.kit.api import THREADS, Caller, answered, post_ok

VOLATILE = ("id", "seq", "parent_id", "content_hash", "created_at")


def _answer(response: Any) -> tuple[int, dict[str, str], Any]:
    headers = {name: value for name, value in response.items() if name != "Content-Length"}
    body = json.loads(response.content) if response.content else None
    if isinstance(body, dict):
        body = {name: value for name, value in body.items() if name not in VOLATILE}
    return response.status_code, headers, body


CASES = {
    "plain": {"role": "user", "content": "Start at the Colosseum at eight."},
    "blocks": {"role": "assistant", "content": [{"type": "text", "text": "Then the Forum."}], "metadata": {"a": 1}},
    "bad role": {"role": "pilot", "content": "hi"},
    "unknown field": {"role": "user", "content": "hi", "colour": "red"},
    "not an object": ["role", "user"],
    "no content": {"role": "user"},
    "nul": '{"role": "user", "content": "a\\u0000b"}',
    "malformed": '{"role": "user", "content": ',
    "tool calls": {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "name": "f", "arguments": {}}]},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_answer_is_drf_views_own(alice: Caller, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    post_ok(alice.client, THREADS, {"id": "t-one"})
    post_ok(alice.client, f"{THREADS}/t-one/entries", {"role": "user", "content": "first"})  # the key is cached
    body = CASES[case]
    data = body if isinstance(body, str) else json.dumps(body)
    url = f"{THREADS}/t-one/entries"

    fast = alice.client.post(url, data, content_type="application/json")
    monkeypatch.setattr(threads_api, "_single_append", lambda *args: None)
    drf = alice.client.post(url, data, content_type="application/json")

    assert _answer(fast) == _answer(drf)
    assert fast.wsgi_request.user.agent == alice.agent


def test_another_agents_thread_is_not_found_on_either_path(
    alice: Caller, bob: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    post_ok(bob.client, THREADS, {"id": "t-bobs"})
    post_ok(alice.client, THREADS, {"id": "t-alices"})
    url = f"{THREADS}/t-bobs/entries"
    answers = [answered(alice.client.post(url, {"role": "user", "content": "hi"}, format="json"), 404)]
    monkeypatch.setattr(threads_api, "_single_append", lambda *args: None)
    answers.append(answered(alice.client.post(url, {"role": "user", "content": "hi"}, format="json"), 404))
    assert answers[0] == answers[1]
    assert not Entry.objects.filter(agent=alice.agent).exists()


def _drf_refused(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """DRF's handling made to say it ran (and refuse the request), for telling which path answered."""
    seen: list[str] = []
    original = APIView.initial

    def initial(self: APIView, request: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(request.method)
        original(self, request, *args, **kwargs)

    monkeypatch.setattr(APIView, "initial", initial)
    return seen


def test_a_plain_single_append_goes_past_drf(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    post_ok(alice.client, THREADS, {"id": "t-one"})
    post_ok(alice.client, f"{THREADS}/t-one/entries", {"role": "user", "content": "first"})
    seen = _drf_refused(monkeypatch)

    post_ok(alice.client, f"{THREADS}/t-one/entries", {"role": "user", "content": "second"})

    assert seen == []
    assert Entry.objects.filter(thread__external_id="t-one").count() == 2


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        ({"entries": [{"role": "user", "content": "a batch"}]}, {}),
        ({"role": "user", "content": "asks for HTML"}, {"HTTP_ACCEPT": "text/html"}),
        ({"role": "user", "content": "names a run"}, {"HTTP_X_RUN_ID": "run_unknown"}),
    ],
)
def test_anything_else_goes_through_drf(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any], headers: dict[str, str]
) -> None:
    post_ok(alice.client, THREADS, {"id": "t-one"})
    post_ok(alice.client, f"{THREADS}/t-one/entries", {"role": "user", "content": "first"})
    seen = _drf_refused(monkeypatch)

    alice.client.post(f"{THREADS}/t-one/entries", body, format="json", **headers)

    assert seen == ["POST"]
