"""After a person's erasure, the change events name neither the person nor their threads'
client-chosen ids: the erasure's own `thread.deleted` events carry no thread id, the events
written before it about the erased threads lose theirs, and what the webhooks receive of the
erasure names no erased id."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from memoryapp.forgetting.person import person_erase
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.events import WebhookReceiver, events_number_now
from tests.kit.factories import AgentFactory

PERSON = "p-ines-3w"
THREADS = (f"trip:{PERSON}", f"notes:{PERSON}")
OTHER = "t-bob-kept"


@pytest.fixture(autouse=True)
def receivers_on_localhost(settings: Any) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True


def events_text() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT type, thread_id, ids::text FROM memoryapp_event ORDER BY id")
        return "\n".join(" | ".join(str(c) for c in row) for row in cursor.fetchall())


@pytest.mark.django_db
def test_after_an_erasure_no_event_and_no_webhook_delivery_names_the_erased_threads(
    django_capture_on_commit_callbacks: Any,
) -> None:
    from memoryapp.events.webhooks import webhook_create

    agent = AgentFactory(slug="alice")
    with WebhookReceiver().running() as receiver:
        webhook_create(agent=agent, url=receiver.url, secret="s")
        with django_capture_on_commit_callbacks(execute=True):
            for external_id in THREADS:
                thread = thread_create(agent=agent, external_id=external_id, user_id=PERSON)
                entry_add(thread=thread, role="user", content="book the train")
            entry_add(thread=thread_create(agent=agent, external_id=OTHER, user_id="bob"), role="user", content="hi")
            events_number_now()
        before = len(receiver.deliveries)
        assert PERSON in events_text()

        with django_capture_on_commit_callbacks(execute=True):
            person_erase(user_id=PERSON, agent_ids=[agent.pk], actor="agent:alice")
            events_number_now()

        after = [d.json for d in receiver.deliveries[before:]]
    stored = events_text()
    assert PERSON not in stored
    assert stored.count("thread.deleted") == len(THREADS)
    assert OTHER in stored  # another person's events keep their thread
    sent = [e for body in after for e in body["events"]]
    assert [e["type"] for e in sent].count("thread.deleted") == len(THREADS)
    assert PERSON not in str(after)


def audit_text() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT action, thread_id, subject, details::text FROM governance_auditrecord ORDER BY seq")
        return "\n".join(" | ".join(str(c) for c in row) for row in cursor.fetchall())
