"""Agent requests go past the browser pages' middlewares (sessions, CSRF, the logged-in user,
messages: memoryapp.api.middleware._BrowserPagesOnly); the admin and the staff's export API, which
take a session, still get all four."""

from __future__ import annotations

from django.test import Client

from memoryapp.api.auth import AgentUser
from memoryapp.models import Entry
from tests.kit.admin import staff_client
from tests.kit.api import THREADS, Caller, answered
from tests.kit.factories import StaffFactory


def test_an_agent_request_gets_no_session_csrf_cookie_or_messages(alice: Caller) -> None:
    staff = staff_client()  # a browser logged in to the admin, whose cookies an agent's client sends too
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {alice.key}")
    client.cookies = staff.cookies
    answered(client.post(THREADS, {"id": "t-cookies"}, content_type="application/json"), 201)

    response = client.post(
        f"{THREADS}/t-cookies/entries", {"role": "user", "content": "hello"}, content_type="application/json"
    )

    answered(response, 201)
    request = response.wsgi_request
    assert not hasattr(request, "session")
    assert not hasattr(request, "_messages")
    assert "CSRF_COOKIE" not in request.META
    assert isinstance(request.user, AgentUser) and request.user.agent == alice.agent  # set by the API's own key check
    assert not response.cookies
    assert "Cookie" not in response.get("Vary", "")
    assert Entry.objects.filter(thread__external_id="t-cookies", agent=alice.agent).count() == 1


def test_the_mcp_endpoint_gets_no_session_either(alice: Caller) -> None:
    client = Client(
        HTTP_AUTHORIZATION=f"Bearer {alice.key}",
        HTTP_ACCEPT="application/json, text/event-stream",
        HTTP_MCP_PROTOCOL_VERSION="2025-06-18",
    )

    response = client.post("/mcp/", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, content_type="application/json")

    assert response.status_code == 200, response.content
    assert not hasattr(response.wsgi_request, "session")


def test_the_admin_keeps_sessions_csrf_and_messages(db: None) -> None:
    StaffFactory(username="olga", password="a-long-password-1")
    browser = Client(enforce_csrf_checks=True)

    login = browser.get("/admin/login/")
    assert login.status_code == 200
    assert hasattr(login.wsgi_request, "session") and hasattr(login.wsgi_request, "_messages")
    refused = browser.post("/admin/login/", {"username": "olga", "password": "a-long-password-1"})
    assert refused.status_code == 403  # no CSRF token: refused as before
    token = browser.cookies["csrftoken"].value
    signed_in = browser.post(
        "/admin/login/", {"username": "olga", "password": "a-long-password-1", "csrfmiddlewaretoken": token}
    )
    assert signed_in.status_code == 302
    assert browser.get("/admin/").wsgi_request.user.username == "olga"


def test_the_staff_export_api_under_the_agent_prefix_keeps_the_session(db: None) -> None:
    staff = staff_client(username="olav")

    response = staff.get("/api/v1/staff/exports/999999")

    assert hasattr(response.wsgi_request, "session")
    assert response.wsgi_request.user.username == "olav"
