"""Every error has one shape, {"error": {"code", "message", "field"?}}, with a 4xx status, and writes nothing."""

from __future__ import annotations

import pytest

from memoryapp.models import Entry, Thread
from tests.kit.api import error_of, post_thread

pytestmark = pytest.mark.django_db


def _thread(alice) -> str:
    post_thread(alice, "t-errors", user_id="u-ana")
    return "t-errors"


def test_malformed_json_is_a_400_with_the_error_shape(alice) -> None:
    tid = _thread(alice)
    response = alice.client.post(f"/api/v1/threads/{tid}/entries", data=b"{not json", content_type="application/json")
    assert error_of(response)["code"] == "malformed_json"
    assert Entry.objects.count() == 0


def test_wrong_type_names_the_field(alice) -> None:
    tid = _thread(alice)
    response = alice.client.post(f"/api/v1/threads/{tid}/entries", {"role": 7, "content": "x"}, format="json")
    assert error_of(response)["field"] == "role"
    assert Entry.objects.count() == 0


def test_unknown_field_names_the_field(alice) -> None:
    tid = _thread(alice)
    response = alice.client.post(
        f"/api/v1/threads/{tid}/entries", {"role": "user", "content": "x", "colour": "red"}, format="json"
    )
    assert error_of(response)["field"] == "colour"
    assert Entry.objects.count() == 0


def test_body_that_is_not_an_object_is_a_400(alice) -> None:
    response = alice.client.post("/api/v1/threads", data=b"[1, 2]", content_type="application/json")
    assert 400 <= response.status_code < 500
    error_of(response, response.status_code)
    assert Thread.objects.count() == 0


def test_nul_character_is_refused_not_a_500(alice) -> None:
    tid = _thread(alice)
    response = alice.client.post(
        f"/api/v1/threads/{tid}/entries", {"role": "user", "content": "a\u0000b"}, format="json"
    )
    assert 400 <= response.status_code < 500, response.content
    error_of(response, response.status_code)
    assert Entry.objects.count() == 0


def test_unknown_route_and_wrong_method_have_the_shape(alice) -> None:
    response = alice.client.delete("/api/v1/")
    assert error_of(response, 405)["code"] == "method_not_allowed"
