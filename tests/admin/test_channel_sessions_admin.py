"""The admin's channel sessions: a read-only list of which thread each person's chat goes to, for the roles
that read conversations, and no page at all for operators."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memoryapp.admin.conversation import thread_url
from memoryapp.sessions.services import session_close, session_open
from tests.kit.api import Caller
from tests.kit.review_staff import staff

pytestmark = pytest.mark.django_db

LIST_URL = "/admin/memoryapp/channelsession/"


def test_reviewers_read_sessions_with_a_link_to_each_thread(alice: Caller, bob: Caller) -> None:
    opened = session_open(agent=alice.agent, user_id="u-ana", channel_type="telegram", channel_id="chat-4411").session
    closed = session_open(agent=alice.agent, user_id="u-ben", channel_type="slack", channel_id="C01-general").session
    session_close(agent=alice.agent, session_id=closed.id)
    session_open(agent=bob.agent, user_id="u-cy", channel_type="web", channel_id="widget-9")

    reviewer = staff("reviewer")
    page = reviewer.get(LIST_URL)
    assert page.status_code == 200
    text = page.content.decode()
    assert "chat-4411" in text and "C01-general" in text and "widget-9" in text
    assert thread_url(opened.thread.pk) in text
    assert "Add channel session" not in text

    only_closed = reviewer.get(LIST_URL, {"status__exact": "closed"}).content.decode()
    assert "C01-general" in only_closed and "chat-4411" not in only_closed
    # A person's id is looked up whole, not as a substring of others.
    by_person = reviewer.get(LIST_URL, {"q": "u-ana"}).content.decode()
    assert "chat-4411" in by_person and "C01-general" not in by_person
    assert "chat-4411" not in reviewer.get(LIST_URL, {"q": "ana"}).content.decode()

    detail = reviewer.get(reverse("admin:memoryapp_channelsession_change", args=[opened.pk]))
    assert detail.status_code == 200 and thread_url(opened.thread.pk) in detail.content.decode()
    assert 'type="submit"' not in detail.content.decode().split('id="content"', 1)[-1].split("</form>", 1)[0]


def test_no_one_edits_or_deletes_a_session_here(alice: Caller) -> None:
    session = session_open(agent=alice.agent, user_id="u-ana", channel_type="telegram", channel_id="chat-1").session
    privacy = staff("privacy")
    assert privacy.get(LIST_URL).status_code == 200
    assert privacy.get(reverse("admin:memoryapp_channelsession_add")).status_code == 403
    delete_url = reverse("admin:memoryapp_channelsession_delete", args=[session.pk])
    assert privacy.post(delete_url, {"post": "yes"}).status_code == 403
    change_url = reverse("admin:memoryapp_channelsession_change", args=[session.pk])
    privacy.post(change_url, {"status": "closed"})
    session.refresh_from_db()
    assert session.status == "active"


def test_operators_have_no_page_of_sessions(alice: Caller) -> None:
    session_open(agent=alice.agent, user_id="u-ana", channel_type="telegram", channel_id="chat-1")
    operator = staff("operator")
    assert operator.get(LIST_URL).status_code == 403
