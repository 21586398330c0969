"""Webhooks: an agent's events POSTed to a receiver, signed (HMAC-SHA256 over timestamp and body), in
order, retried with backoff by a job, failures visible to operators in the admin."""

from __future__ import annotations

import json
import logging
import socket
import time
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from governance.crypto.rotation import encryption_rotate
from governance.models import AuditRecord, JobRun
from memoryapp.errors import DomainError
from memoryapp.events.webhooks import (
    SIGNATURE_HEADER,
    WEBHOOK_RETRIES,
    WebhookUnreachable,
    address_is_public,
    delivery_failure_reason,
    delivery_session,
    webhook_create,
    webhook_deliver,
    webhook_signature,
    webhook_signature_verify,
    webhook_update,
    webhooks_sweep,
)
from memoryapp.models import Webhook, WebhookDelivery
from memoryapp.tasks.events import webhook_deliver_job
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.admin import secrets_in_cookies, staff_client
from tests.kit.api import Caller
from tests.kit.crypto import K1, encrypted, keys_set  # noqa: F401  (encrypted: the fixture)
from tests.kit.events import WebhookReceiver, events_number_now
from tests.kit.factories import AgentFactory


@pytest.fixture(autouse=True)
def receivers_on_localhost(settings: Any) -> None:
    """The receivers of these tests listen on 127.0.0.1: a private address, refused by default."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True


def _verified(receiver: WebhookReceiver, secret: str) -> list[bool]:
    return [
        webhook_signature_verify(secret=secret, header=d.headers[SIGNATURE_HEADER.lower()], body=d.body)
        for d in receiver.deliveries
    ]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_fails_twice_gets_the_same_signed_batch_a_third_time_from_a_real_worker() -> None:
    """Through Redis and a real Celery worker: the commit wakes the webhook, the job POSTs the batch,
    the receiver answers 500 twice, the job retries after its backoff and the third attempt is taken.
    Each attempt is a delivery row (the admin shows them) and carries a valid signature; the body is
    the same three times (the receiver drops repeats by seq)."""
    from celery.contrib.testing.worker import start_worker

    from memory_project.celery import app

    agent = AgentFactory(slug="hooked")
    thread = thread_create(agent=agent, external_id="t-hook")
    with WebhookReceiver(fail_first=2).running() as receiver:
        webhook = webhook_create(agent=agent, url=receiver.url, secret="s3cret", actor="staff:olga")
        app.conf.task_always_eager = False
        try:
            with start_worker(app, perform_ping_check=False, queues=["default"], pool="solo", shutdown_timeout=10):
                with transaction.atomic():  # three events, committed together
                    written = [entry_add(thread=thread, role="user", content=f"turn {n}").id for n in range(3)]
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline and not any(d.status == 200 for d in receiver.deliveries):
                    time.sleep(0.1)
                time.sleep(0.5)  # the run records its success after the answer
        finally:
            app.conf.task_always_eager = True

    assert [d.status for d in receiver.deliveries][:3] == [500, 500, 200], receiver.deliveries
    assert all(_verified(receiver, "s3cret"))
    assert not any(_verified(receiver, "another secret"))
    assert len(receiver.deliveries) == 3
    bodies = [d.json for d in receiver.deliveries]
    assert bodies[0] == bodies[1] == bodies[2]
    assert [e["seq"] for e in bodies[2]["events"]] == [1, 2, 3]
    assert [i for e in bodies[2]["events"] for i in e["ids"]] == written
    assert bodies[0]["agent"] == "hooked" and bodies[0]["webhook_id"] == webhook.pk
    webhook.refresh_from_db()
    assert webhook.delivered_seq == 3 and webhook.failures == 0 and webhook.last_success_at is not None
    attempts = list(WebhookDelivery.objects.filter(webhook=webhook).order_by("at", "id"))
    assert [(a.attempt, a.ok, a.status_code) for a in attempts[:3]] == [
        (1, False, 500),
        (2, False, 500),
        (3, True, 200),
    ]
    assert "HTTP 500" in attempts[0].error
    run = JobRun.objects.filter(kind="webhook_delivery").order_by("created_at").first()
    assert run is not None and run.status == "succeeded" and run.attempts == 3, (run and run.status, run and run.error)


@pytest.mark.django_db
def test_each_webhook_gets_its_own_agents_events_only_and_the_next_batch_starts_after_the_last(
    django_capture_on_commit_callbacks: Any,
) -> None:
    alice, bob = AgentFactory(slug="alice"), AgentFactory(slug="bob")
    with WebhookReceiver().running() as to_alice, WebhookReceiver().running() as to_bob:
        webhook_create(agent=alice, url=to_alice.url, secret="a")
        webhook_create(agent=bob, url=to_bob.url, secret="b")
        with django_capture_on_commit_callbacks(execute=True):
            thread = thread_create(agent=alice, external_id="t")
            entry_add(thread=thread, role="user", content="one")
            entry_add(thread=thread, role="user", content="two")
            events_number_now()
        with django_capture_on_commit_callbacks(execute=True):
            entry_add(thread=thread, role="user", content="three")
            events_number_now()

    assert to_bob.deliveries == []
    batches = [[e["seq"] for e in d.json["events"]] for d in to_alice.deliveries]
    assert batches == [[1, 2], [3]]
    assert all(_verified(to_alice, "a"))
    assert "one" not in to_alice.deliveries[0].body.decode()
    assert Webhook.objects.get(agent=alice).delivered_seq == 3


def test_with_encryption_on_a_webhooks_secret_is_sealed_in_the_database_and_deliveries_still_verify(
    encrypted: Any,  # noqa: F811  (the fixture imported above)
    db: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    agent = AgentFactory(slug="sealed")
    secret = "plum-harbour-signing-secret"
    with WebhookReceiver().running() as receiver:
        webhook = webhook_create(agent=agent, url=receiver.url, secret=secret)
        with django_capture_on_commit_callbacks(execute=True):
            entry_add(thread=thread_create(agent=agent, external_id="t"), role="user", content="one")
            events_number_now()

    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM memoryapp_webhook WHERE id = %s", [webhook.pk])
        (stored,) = cursor.fetchone()
    assert stored.startswith("enc:") and secret not in stored
    assert Webhook.objects.get(pk=webhook.pk).secret == secret
    assert receiver.deliveries and all(_verified(receiver, secret))


def test_a_webhook_secret_stored_before_encryption_is_sealed_by_the_rotation(
    encrypted: Any,  # noqa: F811  (the fixture imported above)
    db: None,
    settings: Any,
) -> None:
    keys_set(settings, "")
    webhook = webhook_create(agent=AgentFactory(slug="older"), url="http://127.0.0.1:9/h", secret="plain-old-secret")
    keys_set(settings, K1)

    encryption_rotate(settle=0)

    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM memoryapp_webhook WHERE id = %s", [webhook.pk])
        (stored,) = cursor.fetchone()
    assert stored.startswith("enc:") and Webhook.objects.get(pk=webhook.pk).secret == "plain-old-secret"


@pytest.mark.django_db
def test_a_webhook_made_now_starts_after_the_events_already_committed(django_capture_on_commit_callbacks: Any) -> None:
    agent = AgentFactory(slug="late")
    thread = thread_create(agent=agent, external_id="t")
    entry_add(thread=thread, role="user", content="before the webhook")
    events_number_now()
    with WebhookReceiver().running() as receiver:
        webhook = webhook_create(agent=agent, url=receiver.url, secret="x")
        assert webhook.delivered_seq == 1
        with django_capture_on_commit_callbacks(execute=True):
            entry_add(thread=thread, role="user", content="after it")
            events_number_now()
    assert [[e["seq"] for e in d.json["events"]] for d in receiver.deliveries] == [[2]]


@pytest.mark.django_db
def test_a_webhook_that_fails_every_retry_rests_and_the_sweep_tries_again_once_the_rest_is_over(
    django_capture_on_commit_callbacks: Any,
) -> None:
    agent = AgentFactory(slug="down")
    thread = thread_create(agent=agent, external_id="t")
    with WebhookReceiver(fail_first=1000).running() as receiver:
        webhook = webhook_create(agent=agent, url=receiver.url, secret="x")
        with django_capture_on_commit_callbacks(execute=True):
            entry_add(thread=thread, role="user", content="hello")
            events_number_now()
        webhook.refresh_from_db()
        run = JobRun.objects.get(kind="webhook_delivery")
        assert run.status == "failed" and run.attempts == WEBHOOK_RETRIES + 1, (run.status, run.attempts)
        assert len(receiver.deliveries) == WEBHOOK_RETRIES + 1
        assert webhook.failures == WEBHOOK_RETRIES + 1 and webhook.delivered_seq == 0
        assert webhook.paused_until is not None and webhook.paused_until > timezone.now()
        assert "HTTP 500" in webhook.last_error

        # Resting: neither a new write nor the sweep sends it.
        with django_capture_on_commit_callbacks(execute=True):
            entry_add(thread=thread, role="user", content="still down?")
            events_number_now()
            assert webhooks_sweep() == 0
        assert len(receiver.deliveries) == WEBHOOK_RETRIES + 1

        receiver.fail_first = 0
        Webhook.objects.filter(pk=webhook.pk).update(paused_until=timezone.now() - timedelta(seconds=1))
        with django_capture_on_commit_callbacks(execute=True):
            assert webhooks_sweep() == 1
    webhook.refresh_from_db()
    assert webhook.delivered_seq == 2 and webhook.failures == 0 and webhook.paused_until is None
    assert [e["seq"] for e in receiver.deliveries[-1].json["events"]] == [1, 2]


def test_the_signature_is_an_hmac_of_the_timestamp_and_the_body_and_fails_for_any_change() -> None:
    body = json.dumps({"events": [{"seq": 1}]}).encode()
    header = webhook_signature(secret="k", timestamp=1_700_000_000, body=body)
    assert header.startswith("t=1700000000,v1=") and len(header.split("v1=")[1]) == 64
    assert webhook_signature_verify(secret="k", header=header, body=body, now=1_700_000_100)
    assert not webhook_signature_verify(secret="k", header=header, body=body + b" ", now=1_700_000_100)
    assert not webhook_signature_verify(secret="K", header=header, body=body, now=1_700_000_100)
    assert not webhook_signature_verify(secret="k", header=header.replace("t=17", "t=18"), body=body, now=1_800_000_000)
    # Too old: a replay of a captured delivery is refused.
    assert not webhook_signature_verify(secret="k", header=header, body=body, now=1_700_001_000)
    assert not webhook_signature_verify(secret="k", header="v1=abc", body=body)
    # A forged header with characters outside ASCII is refused, not an exception in the receiver.
    forged = header[:-1] + "\u00e9"
    assert not webhook_signature_verify(secret="k", header=forged, body=body, now=1_700_000_100)
    assert not webhook_signature_verify(secret="k", header="t=1700000000,v1=\ud800", body=body, now=1_700_000_100)


@pytest.mark.django_db
def test_operators_set_up_a_webhook_audited_and_see_its_failed_deliveries(alice: Caller) -> None:
    operator = staff_client(groups=("Operators",))
    page = operator.post(
        "/admin/memoryapp/webhook/add/",
        {"agent": alice.agent.pk, "url": "http://127.0.0.1:9/hook", "secret": "", "active": "on"},
    )
    assert page.status_code == 200, page.content[:2000]
    webhook = Webhook.objects.get(agent=alice.agent)
    assert len(webhook.secret) >= 32  # generated, and shown once on this page (never in a cookie)
    assert webhook.secret in page.content.decode() and not secrets_in_cookies(page, webhook.secret)
    assert webhook.secret not in operator.get(f"/admin/memoryapp/webhook/{webhook.pk}/change/").content.decode()
    assert AuditRecord.objects.filter(action="webhook.created", subject=str(webhook.pk)).exists()
    WebhookDelivery.objects.create(
        webhook=webhook,
        first_seq=1,
        last_seq=2,
        events=2,
        attempt=1,
        status_code=None,
        error="ConnectionError: refused",
    )
    Webhook.objects.filter(pk=webhook.pk).update(failures=1, last_error="ConnectionError: refused")

    listing = operator.get("/admin/memoryapp/webhook/", {"delivery": "failing"})
    assert listing.status_code == 200 and b"ConnectionError: refused" in listing.content
    detail = operator.get(f"/admin/memoryapp/webhook/{webhook.pk}/change/")
    assert detail.status_code == 200 and b"every attempt" in detail.content and b"failed" in detail.content
    failed = operator.get("/admin/memoryapp/webhookdelivery/", {"ok__exact": "0"})
    assert failed.status_code == 200 and b"ConnectionError: refused" in failed.content

    changed = operator.post(
        f"/admin/memoryapp/webhook/{webhook.pk}/change/",
        {"agent": alice.agent.pk, "url": "https://hooks.example.com/m", "secret": "", "active": ""},
    )
    assert changed.status_code == 302
    webhook.refresh_from_db()
    assert webhook.url == "https://hooks.example.com/m" and not webhook.active
    record = AuditRecord.objects.get(action="webhook.changed")
    assert record.details["changed"] == ["url", "active"] and webhook.secret not in json.dumps(record.details)
    # Reviewers have nothing to do with webhooks.
    assert staff_client(groups=("Reviewers",)).get("/admin/memoryapp/webhook/").status_code == 403


def test_an_operator_deletes_a_webhook_that_has_delivery_attempts_with_them_audited(alice: Caller) -> None:
    operator = staff_client(groups=("Operators",))
    webhooks = [
        webhook_create(agent=alice.agent, url=f"http://127.0.0.1:9/hook{i}", secret="s" * 32, active=True)
        for i in range(3)
    ]
    for webhook in webhooks:
        for attempt in (1, 2):
            WebhookDelivery.objects.create(
                webhook=webhook, first_seq=1, last_seq=2, events=2, attempt=attempt, error="ConnectionError: refused"
            )
    first, *others = webhooks

    confirm = operator.get(f"/admin/memoryapp/webhook/{first.pk}/delete/")
    assert confirm.status_code == 200
    assert b"permission to delete" not in confirm.content
    deleted = operator.post(f"/admin/memoryapp/webhook/{first.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302, deleted.content[:2000]
    assert not Webhook.objects.filter(pk=first.pk).exists()
    assert not WebhookDelivery.objects.filter(webhook_id=first.pk).exists()

    # The list's bulk action too.
    ids = [str(w.pk) for w in others]
    asked = operator.post("/admin/memoryapp/webhook/", {"action": "delete_selected", "_selected_action": ids})
    assert asked.status_code == 200 and b"permission to delete" not in asked.content
    done = operator.post(
        "/admin/memoryapp/webhook/", {"action": "delete_selected", "_selected_action": ids, "post": "yes"}
    )
    assert done.status_code == 302
    assert not Webhook.objects.exists() and not WebhookDelivery.objects.exists()
    assert AuditRecord.objects.filter(action="webhook.deleted").count() == 3
    # The delivery log itself stays read-only: no one deletes attempts alone.
    attempt_page = operator.get("/admin/memoryapp/webhookdelivery/")
    assert attempt_page.status_code == 200 and b"delete_selected" not in attempt_page.content


@pytest.mark.django_db
def test_a_delivery_run_leaves_the_webhook_to_a_run_waiting_for_its_retry(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The retry reads every event after the cursor: a second run would only knock twice on a
    receiver that is failing."""
    agent = AgentFactory(slug="waiting")
    thread = thread_create(agent=agent, external_id="t")
    with WebhookReceiver().running() as receiver:
        webhook = webhook_create(agent=agent, url=receiver.url, secret="x")
        waiting = JobRun.objects.create(
            kind="webhook_delivery", dedupe_key=f"webhook:{webhook.pk}", status="queued", attempts=1,
            task_name="memoryapp.tasks.webhook_deliver", arguments={"webhook_id": webhook.pk},
        )  # fmt: skip
        later = JobRun.objects.create(kind="webhook_delivery", arguments={"webhook_id": webhook.pk})
        entry_add(thread=thread, role="user", content="hello")
        events_number_now()
        webhook_deliver_job(later.pk)
        later.refresh_from_db()
        assert later.status == "skipped" and "waits for its retry" in later.result["skipped"]
        assert receiver.deliveries == []
        JobRun.objects.filter(pk=waiting.pk).update(status="failed")
        again = JobRun.objects.create(kind="webhook_delivery", arguments={"webhook_id": webhook.pk})
        webhook_deliver_job(again.pk)
        again.refresh_from_db()
    assert again.status == "succeeded" and again.result["delivered"] == 1 and len(receiver.deliveries) == 1


PRIVATE_URLS = (
    "http://127.0.0.1:8000/hook",
    "http://localhost/hook",
    "http://api.localhost./hook",
    "http://10.1.2.3/hook",
    "http://192.168.0.10/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://100.64.0.1/hook",
    "http://0.0.0.0/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[fd00::1]/hook",
)


@pytest.mark.django_db
def test_a_webhook_url_naming_a_private_address_is_refused_naming_url_and_writes_nothing(settings: Any) -> None:
    """SSRF: an operator's webhook must not make the service POST into its own network (the cloud
    metadata address, a database, the broker) and show the answer in the admin."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    agent = AgentFactory(slug="ssrf")
    for url in PRIVATE_URLS:
        with pytest.raises(DomainError) as refused:
            webhook_create(agent=agent, url=url, secret="x")
        assert refused.value.field == "url" and refused.value.code == "private_url", url
    for url in ("ftp://hooks.example.com/x", "http:///x", "http://hooks.example.com:99999/x"):
        with pytest.raises(DomainError) as refused:
            webhook_create(agent=agent, url=url, secret="x")
        assert refused.value.field == "url", url
    assert not Webhook.objects.exists()
    public = webhook_create(agent=agent, url="https://hooks.example.com/m", secret="x")
    with pytest.raises(DomainError) as refused:
        webhook_update(webhook=public, url="http://10.0.0.1/x", secret="", active=True)
    assert refused.value.field == "url"
    public.refresh_from_db()
    assert public.url == "https://hooks.example.com/m"


# IPv6 addresses that carry a private IPv4 address, which a NAT64 translator or the stack delivers
# there: the cloud metadata address and loopback through NAT64, 6to4 and the IPv4-compatible form.
EMBEDDED_PRIVATE_URLS = (
    "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",
    "http://[64:ff9b::127.0.0.1]/hook",
    "http://[64:ff9b:1::a00:1]/hook",
    "http://[2002:7f00:1::1]/hook",
    "http://[::127.0.0.1]/hook",
)


@pytest.mark.django_db
def test_an_ipv6_url_carrying_a_private_ipv4_address_is_refused_and_never_connected_to(settings: Any) -> None:
    """NAT64 (64:ff9b::/96) is global to Python's ipaddress, but 64:ff9b::a9fe:a9fe reaches
    169.254.169.254 wherever NAT64 runs: the IPv4 address inside is what is judged, at the URL's
    check and at the connection (the same `address_is_public`)."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    agent = AgentFactory(slug="nat64")
    for url in EMBEDDED_PRIVATE_URLS:
        with pytest.raises(DomainError) as refused:
            webhook_create(agent=agent, url=url, secret="x")
        assert refused.value.code == "private_url", url
    assert not Webhook.objects.exists()
    for address in ("64:ff9b::a9fe:a9fe", "2002:a00:1::1", "::7f00:1", "::ffff:10.0.0.1"):
        assert not address_is_public(address), address
    # A public IPv4 address behind the same prefixes stays public.
    assert address_is_public("64:ff9b::808:808") and address_is_public("2002:808:808::1")
    assert address_is_public("::ffff:8.8.8.8") and address_is_public("2606:4700::1111")


@pytest.mark.django_db
def test_the_admin_form_refuses_a_private_or_non_http_url_as_a_form_error(settings: Any, alice: Caller) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    operator = staff_client(groups=("Operators",))
    for url in ("http://169.254.169.254/latest/meta-data/", "ftp://hooks.example.com/x"):
        page = operator.post(
            "/admin/memoryapp/webhook/add/", {"agent": alice.agent.pk, "url": url, "secret": "", "active": "on"}
        )
        assert page.status_code == 200 and b"errorlist" in page.content, (url, page.status_code)
    assert not Webhook.objects.exists()


@pytest.mark.django_db
def test_a_delivery_to_a_name_that_resolves_to_a_private_address_is_not_made(
    settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    """A name is checked once resolved, at each delivery: a webhook whose host name resolves to a
    private address (this machine's own name here) sends nothing there, and says why."""
    name = socket.gethostname()
    if all(address_is_public(str(info[4][0])) for info in socket.getaddrinfo(name, 80)):
        pytest.skip("this machine's name resolves to a public address")
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    agent = AgentFactory(slug="rebound")
    thread = thread_create(agent=agent, external_id="t")
    with WebhookReceiver().running() as receiver:
        url = receiver.url.replace("127.0.0.1", name)
        webhook = webhook_create(agent=agent, url=url, secret="x")  # a name: taken, checked when used
        entry_add(thread=thread, role="user", content="hello")
        events_number_now()
        with pytest.raises(WebhookUnreachable):
            webhook_deliver(webhook_id=webhook.pk)
        assert receiver.deliveries == []
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True  # the same webhook, allowed: delivered
        assert webhook_deliver(webhook_id=webhook.pk)["delivered"] == 1
        assert len(receiver.deliveries) == 1
    attempt = WebhookDelivery.objects.filter(webhook=webhook).order_by("id").first()
    assert attempt is not None and not attempt.ok and "not public" in attempt.error


@pytest.mark.django_db
def test_a_webhooks_secret_is_shown_once_when_generated_and_never_on_its_page(alice: Caller) -> None:
    """The change page wrote the secret back into its form: anyone who may view webhooks read it
    (and could sign deliveries the receiver trusts)."""
    operator = staff_client(groups=("Operators",))
    made = operator.post(
        "/admin/memoryapp/webhook/add/",
        {"agent": alice.agent.pk, "url": "https://hooks.example.com/m", "secret": "", "active": "on"},
        follow=True,
    )
    webhook = Webhook.objects.get(agent=alice.agent)
    assert made.status_code == 200 and webhook.secret.encode() in made.content  # once, to give the receiver
    page = operator.get(f"/admin/memoryapp/webhook/{webhook.pk}/change/")
    assert page.status_code == 200 and webhook.secret.encode() not in page.content
    assert operator.get("/admin/memoryapp/webhook/").content.count(webhook.secret.encode()) == 0

    kept = webhook.secret
    operator.post(
        f"/admin/memoryapp/webhook/{webhook.pk}/change/",
        {"url": "https://hooks.example.com/m", "secret": "", "active": "on"},
    )
    webhook.refresh_from_db()
    assert webhook.secret == kept  # left empty: kept
    typed = operator.post(
        "/admin/memoryapp/webhook/add/",
        {"agent": alice.agent.pk, "url": "https://hooks.example.com/n", "secret": "typed-by-me", "active": "on"},
        follow=True,
    )
    assert b"typed-by-me" not in typed.content
    changed = operator.post(
        f"/admin/memoryapp/webhook/{webhook.pk}/change/",
        {"url": "https://hooks.example.com/m", "secret": "rotated", "active": "on"},
        follow=True,
    )
    webhook.refresh_from_db()
    assert webhook.secret == "rotated" and b"rotated" not in changed.content


@pytest.mark.django_db
def test_the_webhook_list_reads_how_far_behind_each_is_without_a_query_per_webhook(alice: Caller) -> None:
    operator = staff_client(groups=("Operators",))
    thread = thread_create(agent=alice.agent, external_id="t")
    webhook_create(agent=alice.agent, url="https://hooks.example.com/0", secret="x")
    entry_add(thread=thread, role="user", content="one")
    entry_add(thread=thread, role="user", content="two")
    events_number_now()

    def listing_queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            page = operator.get("/admin/memoryapp/webhook/")
        assert page.status_code == 200
        return len(captured)

    few = listing_queries()
    for n in range(1, 6):
        agent = AgentFactory(slug=f"more-{n}")
        webhook_create(agent=agent, url=f"https://hooks.example.com/{n}", secret="x")
    assert listing_queries() == few
    page = operator.get("/admin/memoryapp/webhook/")
    assert b'<td class="field-behind">2</td>' in page.content


# URLs that one parser reads one way and another the other, or that the resolver reads as an address.
ODD_URLS = (
    ("http://127.0.0.1:8799\\@1.1.1.1/hooks", "invalid_url"),  # urlsplit: host 1.1.1.1; requests: 127.0.0.1
    ("http://hooks.example.com\\evil/hooks", "invalid_url"),
    ("http://user:secret@hooks.example.com/hooks", "userinfo_in_url"),
    ("http://hooks.example.com@127.0.0.1/hooks", "userinfo_in_url"),
    ("http://127.0.0.1%2f@1.1.1.1/hooks", "userinfo_in_url"),
    ("http://2130706433/hooks", "invalid_url"),  # 127.0.0.1 to the resolver
    ("http://0x7f.1/hooks", "invalid_url"),
    ("http://127.1/hooks", "invalid_url"),
    ("http://ho%6fks.example.com/hooks", "invalid_url"),
    ("http://\uff11\uff12\uff17.0.0.1/hooks", "invalid_url"),  # full-width digits: 127.0.0.1 once normalised
    ("http://hooks.example.com /hooks", "invalid_url"),
    ("http://hooks.example.com/\thooks", "invalid_url"),
)


@pytest.mark.parametrize("private_allowed", [False, True])
@pytest.mark.django_db
def test_a_webhook_url_with_user_info_a_backslash_or_an_odd_host_is_refused_naming_url(
    settings: Any, private_allowed: bool
) -> None:
    """`http://127.0.0.1:8799\\@1.1.1.1/` passed the private-address check as host 1.1.1.1 and was
    delivered to 127.0.0.1: a URL is read once, as the HTTP client reads it, and what two parsers
    could read differently is refused, whatever WEBHOOK_ALLOW_PRIVATE_URLS says."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = private_allowed
    agent = AgentFactory(slug="odd")
    for url, code in ODD_URLS:
        with pytest.raises(DomainError) as refused:
            webhook_create(agent=agent, url=url, secret="x")
        assert (refused.value.code, refused.value.field, refused.value.status) == (code, "url", 400), url
    assert not Webhook.objects.exists()


@pytest.mark.django_db
def test_the_admin_form_refuses_a_url_with_user_info_as_a_form_error(settings: Any, alice: Caller) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    operator = staff_client(groups=("Operators",))
    for url in ("http://127.0.0.1:8799\\@1.1.1.1/", "https://user:pw@hooks.example.com/m"):
        page = operator.post(
            "/admin/memoryapp/webhook/add/", {"agent": alice.agent.pk, "url": url, "secret": "", "active": "on"}
        )
        assert page.status_code == 200 and b"errorlist" in page.content, url
    assert b"user name or password" in page.content
    assert not Webhook.objects.exists()


@pytest.mark.django_db
def test_a_stored_url_one_parser_reads_as_a_public_host_is_never_delivered_to_loopback(settings: Any) -> None:
    """A row set before the check knew the trick (or written around it): the delivery reads the URL
    as the client does and connects only to an address it checked, so nothing reaches 127.0.0.1."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    agent = AgentFactory(slug="bypass")
    thread = thread_create(agent=agent, external_id="t")
    with WebhookReceiver().running() as receiver:
        port = receiver.httpd.server_address[1]
        webhook = Webhook.objects.create(agent=agent, url=f"http://127.0.0.1:{port}\\@1.1.1.1/hooks", secret="x")
        entry_add(thread=thread, role="user", content="hello")
        events_number_now()
        with pytest.raises(WebhookUnreachable):
            webhook_deliver(webhook_id=webhook.pk)
        assert receiver.deliveries == []
    attempt = WebhookDelivery.objects.get(webhook=webhook)
    assert not attempt.ok and attempt.status_code is None and attempt.error.startswith("refused: "), attempt.error


def test_the_connection_reaches_only_an_address_it_checked_after_resolving_the_name(settings: Any) -> None:
    """The check is made on the address connected to, after DNS: a name resolving to loopback
    (localhost here, standing for any name re-pointed after its URL was set) is refused by the
    connection itself, without a byte sent, unless WEBHOOK_ALLOW_PRIVATE_URLS."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    with WebhookReceiver().running() as receiver:
        port = receiver.httpd.server_address[1]
        for url in (f"http://localhost:{port}/hooks", f"http://127.0.0.1:{port}/hooks", f"https://localhost:{port}/"):
            with delivery_session() as session, pytest.raises(requests.ConnectionError) as refused:
                session.post(url, data=b"{}", timeout=5, allow_redirects=False)
            host = url.split("//")[1].split(":")[0]
            assert (
                delivery_failure_reason(refused.value) == f"refused: {host} resolves to an address that is not public"
            )
        assert receiver.deliveries == []
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        with delivery_session() as session:
            assert session.post(f"http://localhost:{port}/hooks", data=b"{}", timeout=5).status_code == 200
        assert len(receiver.deliveries) == 1


@pytest.mark.django_db
def test_operators_and_the_worker_log_read_a_status_and_a_short_reason_never_the_receivers_answer(
    caplog: pytest.LogCaptureFixture, django_capture_on_commit_callbacks: Any
) -> None:
    """The first 300 characters of the receiver's reply (an internal service's, through an SSRF)
    were the attempt's error: shown in the admin, kept in the job run and written to the worker log."""
    internal = b"INTERNAL-ONLY: the reply of a service on the private network, password=hunter2"
    agent = AgentFactory(slug="quiet")
    thread = thread_create(agent=agent, external_id="t")
    with WebhookReceiver(fail_first=1000, failure_body=internal).running() as receiver:
        webhook = webhook_create(agent=agent, url=receiver.url, secret="x")
        with caplog.at_level(logging.DEBUG), django_capture_on_commit_callbacks(execute=True):
            entry_add(thread=thread, role="user", content="hello")
            events_number_now()
        assert len(receiver.deliveries) == WEBHOOK_RETRIES + 1
    webhook.refresh_from_db()
    errors = set(WebhookDelivery.objects.filter(webhook=webhook).values_list("error", flat=True))
    assert errors == {"HTTP 500 Internal Server Error"} and webhook.last_error == "HTTP 500 Internal Server Error"
    run = JobRun.objects.get(kind="webhook_delivery")
    assert run.status == "failed" and "HTTP 500" in run.error and "INTERNAL-ONLY" not in run.error
    assert "INTERNAL-ONLY" not in caplog.text and "hunter2" not in caplog.text
    operator = staff_client(groups=("Operators",))
    for page in (
        operator.get(f"/admin/memoryapp/webhook/{webhook.pk}/change/"),
        operator.get("/admin/memoryapp/webhook/"),
        operator.get("/admin/memoryapp/webhookdelivery/"),
    ):
        assert page.status_code == 200 and b"HTTP 500 Internal Server Error" in page.content
        assert b"INTERNAL-ONLY" not in page.content


@pytest.mark.django_db
def test_a_redirect_is_not_followed_and_the_attempt_says_so() -> None:
    """A receiver that redirects (to another server on loopback here) gets one POST; where it points
    gets nothing, and the attempt fails with the status."""
    agent = AgentFactory(slug="moved")
    thread = thread_create(agent=agent, external_id="t")
    with (
        WebhookReceiver().running() as elsewhere,
        WebhookReceiver(redirect_to=elsewhere.url).running() as receiver,
    ):
        webhook = webhook_create(agent=agent, url=receiver.url, secret="x")
        entry_add(thread=thread, role="user", content="hello")
        events_number_now()
        with pytest.raises(WebhookUnreachable):
            webhook_deliver(webhook_id=webhook.pk)
        assert len(receiver.deliveries) == 1 and elsewhere.deliveries == []
    attempt = WebhookDelivery.objects.get(webhook=webhook)
    assert (attempt.status_code, attempt.error) == (302, "HTTP 302 Found (redirects are not followed)")


@pytest.mark.django_db
def test_a_staffer_who_may_only_view_webhooks_never_reads_a_secret(alice: Caller) -> None:
    """A view-only change page shows every form field as read-only text, the secret's included: the
    secret is no field of a page its reader cannot save."""
    webhook = webhook_create(agent=alice.agent, url="http://127.0.0.1:9/hook", secret="sealed-secret-42")
    viewer = staff_client(permissions=("view_webhook",))

    page = viewer.get(f"/admin/memoryapp/webhook/{webhook.pk}/change/")

    assert page.status_code == 200
    assert "sealed-secret-42" not in page.content.decode()
    assert "127.0.0.1:9/hook" in page.content.decode()  # the page itself is shown
