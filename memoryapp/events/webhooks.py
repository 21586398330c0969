"""Webhooks: an agent's events POSTed to a URL an operator set, signed, in order, at least once.

Delivery (the job `memoryapp.tasks.webhook_deliver`, one run per webhook at a time):

1. A commit that recorded events of an agent with an active webhook wakes it (debounced: one run
   pending per webhook); the sweep (beat, every minute) wakes every webhook left behind (a broker
   that was away, a process that had not seen the webhook yet, the end of a pause).
2. The run holds the webhook's advisory lock (one deliverer at a time, so batches go in order),
   reads the events after `delivered_seq`, at most WEBHOOK_BATCH, and POSTs them as JSON, signed:
   `X-Memory-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`.
3. A 2xx moves `delivered_seq` to the batch's last event and the next batch goes; anything else
   (a status, a timeout, a refused connection, a redirect) is recorded as a failed attempt
   (`WebhookDelivery`, and the webhook's `failures` / `last_error`, all in the admin) and raised as
   transient: the job retries the same batch after an exponential backoff. After the last retry
   the webhook rests (`paused_until`, doubling up to an hour) and the sweep tries again then.
4. A receiver may get a batch twice (its 2xx lost on the way): events carry their `seq`, so it
   drops what it has. Events retention deleted before delivery are named in `missed`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from governance import locks
from governance.audit import audit_append
from governance.jobs import job_enqueue_debounced
from governance.models import JobRun
from memoryapp.errors import DomainError
from memoryapp.events.selectors import event_json, events_after, events_last_seq, events_missed
from memoryapp.models import Agent, Event, EventCounter, Webhook, WebhookDelivery

logger = logging.getLogger(__name__)

# The job that delivers (memoryapp.tasks.events), sent by name.
WEBHOOK_TASK = "memoryapp.tasks.webhook_deliver"
WEBHOOK_JOB_KIND = "webhook_delivery"
# Retries of one batch within a run (backoff 2, 4, 8 ... seconds, at most 5 minutes apart).
WEBHOOK_RETRIES = 5
WEBHOOK_BATCH = 100
# A run hands over to the next one after this long, so a big backlog never holds a worker for long.
RUN_SECONDS = 60.0
SIGNATURE_HEADER = "X-Memory-Signature"
# How old a signed timestamp a receiver should accept (webhook_signature_verify).
SIGNATURE_TOLERANCE_SECONDS = 300
MAX_PAUSE_SECONDS = 3600


class WebhookUnreachable(Exception):
    """The receiver did not take a batch (a status other than 2xx, a timeout, a refused connection)."""


# --- signatures ------------------------------------------------------------------------------------


def webhook_signature(*, secret: str, timestamp: int, body: bytes) -> str:
    """The X-Memory-Signature header of a body sent at `timestamp` (unix seconds)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def webhook_signature_verify(
    *, secret: str, header: str, body: bytes, now: float | None = None, tolerance: int = SIGNATURE_TOLERANCE_SECONDS
) -> bool:
    """What a receiver does with the header: the HMAC matches the body and the time is recent."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = webhook_signature(secret=secret, timestamp=timestamp, body=body)
    # As bytes: compare_digest refuses a str with non-ASCII characters (a forged header would raise).
    given = f"t={timestamp},v1={parts.get('v1', '')}".encode("utf-8", "surrogatepass")
    return hmac.compare_digest(expected.encode(), given)


# --- who has webhooks (checked on every write that records an event) --------------------------------

# The agents with an active webhook, as this process last read them: a write of an agent without
# one costs no query. A webhook made in another process is seen here within the cache's life (the
# sweep delivers meanwhile).
AGENTS_CACHE_SECONDS = 10.0
_agents_cache: tuple[float, frozenset[int]] = (0.0, frozenset())
_agents_lock = threading.Lock()


def webhook_agents() -> frozenset[int]:
    global _agents_cache
    with _agents_lock:
        read_at, agents = _agents_cache
        if time.monotonic() - read_at < AGENTS_CACHE_SECONDS:
            return agents
    agents = frozenset(Webhook.objects.filter(active=True).values_list("agent_id", flat=True).distinct())
    with _agents_lock:
        _agents_cache = (time.monotonic(), agents)
    return agents


def webhook_agents_forget() -> None:
    """Read the agents with webhooks again at the next write (after a webhook changed here)."""
    global _agents_cache
    with _agents_lock:
        _agents_cache = (0.0, frozenset())


def _wake(agent_id: int) -> None:
    try:
        webhooks_wake(agent_id=agent_id)
    except Exception:  # the write is committed: the sweep delivers later
        logger.exception("could not wake the webhooks of agent %s", agent_id)


def webhooks_wake_after_commit(*, agent_id: int) -> None:
    """Once the caller's transaction commits, send the delivery jobs of the agent's webhooks.

    Only agents with a webhook pay for it: a query for its webhooks and, per webhook, a Redis
    `SET NX` that finds a run pending after the first event of a transaction.
    """
    if agent_id in webhook_agents():
        transaction.on_commit(functools.partial(_wake, agent_id))


def webhooks_wake(*, agent_id: int) -> int:
    """Send (debounced) the delivery job of each active, not resting webhook of the agent."""
    now = timezone.now()
    woken = 0
    for webhook_id in (
        Webhook.objects.filter(agent_id=agent_id, active=True)
        .filter(Q(paused_until__isnull=True) | Q(paused_until__lte=now))
        .values_list("pk", flat=True)
    ):
        job_enqueue_debounced(
            kind=WEBHOOK_JOB_KIND,
            task_name=WEBHOOK_TASK,
            arguments={"webhook_id": webhook_id},
            debounce_key=webhook_debounce_key(webhook_id),
            agent_id=agent_id,
        )
        woken += 1
    return woken


def webhook_debounce_key(webhook_id: int) -> str:
    return f"webhook:{webhook_id}"


def webhooks_sweep() -> int:
    """Wake every active webhook behind its agent's stream and not resting (beat, every minute)."""
    now = timezone.now()
    last = EventCounter.objects.filter(agent_id=OuterRef("agent_id")).values("last_seq")[:1]
    behind = (
        Webhook.objects.filter(active=True)
        .filter(Q(paused_until__isnull=True) | Q(paused_until__lte=now))
        .annotate(last=Subquery(last))
        .filter(last__gt=F("delivered_seq"))
        .values_list("pk", "agent_id")
    )
    count = 0
    for webhook_id, agent_id in behind:
        job_enqueue_debounced(
            kind=WEBHOOK_JOB_KIND,
            task_name=WEBHOOK_TASK,
            arguments={"webhook_id": webhook_id},
            debounce_key=webhook_debounce_key(webhook_id),
            agent_id=agent_id,
        )
        count += 1
    return count


# --- operators' writes (the admin) ------------------------------------------------------------------


def address_is_public(address: str) -> bool:
    """Whether an IP address is a public one (not loopback, private, link-local, shared, reserved,
    multicast or unspecified; an IPv4-mapped IPv6 address is judged as its IPv4 address)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _private_host(hostname: str) -> bool:
    """A host that names a non-public address by itself (an IP literal, localhost): refused when set."""
    name = hostname.rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False  # a name: checked once resolved, at each delivery (_post)
    return not address_is_public(name)


def webhook_url_check(url: str) -> str:
    """An http(s) URL with a host; unless WEBHOOK_ALLOW_PRIVATE_URLS, not one naming a non-public
    address (a DomainError naming `url`)."""
    parts = urlsplit(url or "")
    try:
        hostname = parts.hostname
        parts.port  # noqa: B018 -- a port out of range raises here
    except ValueError:
        hostname = None
    if parts.scheme not in ("http", "https") or not hostname:
        raise DomainError("invalid_url", "A webhook URL is an http or https URL.", field="url")
    if not settings.WEBHOOK_ALLOW_PRIVATE_URLS and _private_host(hostname):
        raise DomainError(
            "private_url",
            "A webhook URL must reach a public address, not localhost or a private, loopback or "
            "link-local one (WEBHOOK_ALLOW_PRIVATE_URLS allows them).",
            field="url",
        )
    return url


def _destination_refused(url: str) -> str:
    """Why a delivery to `url` must not be made ("" when it may): its host resolves to a non-public
    address (a name that pointed elsewhere when the webhook was set, or changed since)."""
    if settings.WEBHOOK_ALLOW_PRIVATE_URLS:
        return ""
    parts = urlsplit(url)
    hostname = parts.hostname or ""
    if _private_host(hostname):
        return f"refused: {hostname} is not a public address"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        found = socket.getaddrinfo(hostname, port, proto=socket.IPPROTO_TCP)
    except (OSError, ValueError) as exc:
        return f"refused: {hostname} does not resolve ({type(exc).__name__})"
    if not found or not all(address_is_public(str(info[4][0])) for info in found):
        return f"refused: {hostname} resolves to an address that is not public"
    return ""


@transaction.atomic
def webhook_create(*, agent: Agent, url: str, secret: str = "", active: bool = True, actor: str = "") -> Webhook:
    """A webhook of the agent, delivering the events committed from now on (audited, ids only)."""
    webhook = Webhook.objects.create(
        agent=agent,
        url=webhook_url_check(url),
        secret=secret or secrets.token_urlsafe(32),
        active=active,
        delivered_seq=events_last_seq(agent_id=agent.pk),
    )
    webhook_agents_forget()
    audit_append(
        action="webhook.created",
        actor=actor,
        agent_id=agent.pk,
        subject=str(webhook.pk),
        outcome="active" if active else "inactive",
        details={"host": urlsplit(url).hostname},
    )
    # Forgotten now, and again once committed (a write in between may have read the old list).
    transaction.on_commit(webhook_agents_forget)
    return webhook


@transaction.atomic
def webhook_update(*, webhook: Webhook, url: str, secret: str, active: bool, actor: str = "") -> Webhook:
    """Change a webhook's URL, secret or state (audited: what changed, not the secret). Turned back on,
    it no longer rests."""
    locked = Webhook.objects.select_for_update().get(pk=webhook.pk)
    changed = [
        name
        for name, value in (("url", webhook_url_check(url)), ("secret", secret or locked.secret), ("active", active))
        if getattr(locked, name) != value
    ]
    locked.url, locked.secret = url, secret or locked.secret
    if active and not locked.active:
        locked.paused_until = None
    locked.active = active
    locked.save(update_fields=["url", "secret", "active", "paused_until"])
    webhook_agents_forget()
    audit_append(
        action="webhook.changed",
        actor=actor,
        agent_id=locked.agent_id,
        subject=str(locked.pk),
        outcome="active" if active else "inactive",
        details={"changed": changed, "host": urlsplit(locked.url).hostname},
    )
    transaction.on_commit(webhook_agents_forget)
    return locked


@transaction.atomic
def webhook_delete(*, webhook: Webhook, actor: str = "") -> None:
    """Remove a webhook and its delivery attempts (audited)."""
    audit_append(
        action="webhook.deleted",
        actor=actor,
        agent_id=webhook.agent_id,
        subject=str(webhook.pk),
        outcome="deleted",
        details={"delivered_seq": webhook.delivered_seq},
    )
    Webhook.objects.filter(pk=webhook.pk).delete()
    transaction.on_commit(webhook_agents_forget)


# --- delivery --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _delivering(webhook_id: int) -> Iterator[bool]:
    """The webhook's session lock, if free (True): one process delivers to a webhook at a time."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", locks.pair(locks.WEBHOOK, webhook_id))
        row = cursor.fetchone()
    held = bool(row and row[0])
    try:
        yield held
    finally:
        if held:
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", locks.pair(locks.WEBHOOK, webhook_id))


def webhook_body(*, webhook: Webhook, events: list[Event], missed: dict[str, int] | None) -> bytes:
    body: dict[str, Any] = {
        "webhook_id": webhook.pk,
        "agent": webhook.agent.slug,
        "events": [event_json(e) for e in events],
    }
    if missed:
        body["missed"] = missed
    return json.dumps(body, separators=(",", ":")).encode()


def _pause_seconds(failures: int) -> int:
    """How long a webhook rests after a run failed its last retry: a minute, doubling per failed run."""
    failed_runs = max(1, failures // (WEBHOOK_RETRIES + 1))
    return int(min(MAX_PAUSE_SECONDS, 60 * 2 ** min(failed_runs - 1, 10)))


def _post(webhook: Webhook, body: bytes) -> tuple[int | None, str]:
    """POST the body; (status, error text) where error is "" for a 2xx."""
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "memory-governance-webhooks/1",
        "X-Memory-Webhook-Id": str(webhook.pk),
        SIGNATURE_HEADER: webhook_signature(secret=webhook.secret, timestamp=timestamp, body=body),
    }
    refused = _destination_refused(webhook.url)
    if refused:
        return None, refused
    try:
        response = requests.post(
            webhook.url, data=body, headers=headers, timeout=settings.WEBHOOK_TIMEOUT, allow_redirects=False
        )
    except requests.RequestException as exc:
        return None, f"{type(exc).__name__}: {exc}"[:1000]
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"HTTP {response.status_code}: {response.text[:300]}"


def _record_attempt(
    webhook: Webhook, events: list[Event], status: int | None, error: str, started: float, *, final: bool
) -> None:
    now = timezone.now()
    first_seq, last_seq = events[0].seq or 0, events[-1].seq or 0  # numbered: read after their commit
    WebhookDelivery.objects.create(
        webhook=webhook,
        first_seq=first_seq,
        last_seq=last_seq,
        events=len(events),
        attempt=webhook.failures + 1,
        ok=not error,
        status_code=status,
        error=error,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )
    if not error:
        Webhook.objects.filter(pk=webhook.pk, delivered_seq=webhook.delivered_seq).update(
            delivered_seq=last_seq, failures=0, last_error="", last_success_at=now, paused_until=None
        )
        return
    failures = webhook.failures + 1
    fields: dict[str, Any] = {"failures": failures, "last_error": error, "last_failure_at": now}
    if final:
        fields["paused_until"] = now + timedelta(seconds=_pause_seconds(failures))
    Webhook.objects.filter(pk=webhook.pk).update(**fields)


def webhook_retry_waiting(*, webhook_id: int, run_id: int) -> bool:
    """Whether another delivery run of the webhook waits for its retry (its backoff): that retry reads
    every event after the cursor, so this run has nothing to add but a second attempt at a receiver
    that is failing."""
    return (
        JobRun.objects.filter(dedupe_key=webhook_debounce_key(webhook_id), status=JobRun.Status.QUEUED)
        .exclude(pk=run_id)
        .filter(attempts__gt=0)
        .exists()
    )


def webhook_deliver(*, webhook_id: int, final_attempt: bool = True) -> dict[str, Any]:
    """Deliver the webhook's pending events, batch after batch (see the module's steps).

    Raises WebhookUnreachable when the receiver refused a batch (the job retries it); with
    `final_attempt` the webhook then rests before the sweep tries again.
    """
    delivered = batches = 0
    with _delivering(webhook_id) as held:
        if not held:
            return {"skipped": "another process is delivering to this webhook"}
        deadline = time.monotonic() + RUN_SECONDS
        while time.monotonic() < deadline:
            webhook = Webhook.objects.select_related("agent").filter(pk=webhook_id, active=True).first()
            if webhook is None:
                return {"skipped": "the webhook is gone or inactive", "delivered": delivered}
            events = events_after(agent_id=webhook.agent_id, after=webhook.delivered_seq, limit=WEBHOOK_BATCH)
            if not events:
                # Nothing numbered after the cursor; if retention took events it never delivered, the
                # cursor passes them (they are named in the next batch's `missed` no more).
                gone = events_missed(agent_id=webhook.agent_id, after=webhook.delivered_seq)
                if gone is not None:
                    Webhook.objects.filter(pk=webhook.pk, delivered_seq=webhook.delivered_seq).update(
                        delivered_seq=gone.to_seq
                    )
                    continue
                break
            missed = None
            if events[0].seq is not None and events[0].seq > webhook.delivered_seq + 1:
                gap = events_missed(agent_id=webhook.agent_id, after=webhook.delivered_seq)
                missed = gap.as_json() if gap else None
            started = time.monotonic()
            status, error = _post(webhook, webhook_body(webhook=webhook, events=events, missed=missed))
            _record_attempt(webhook, events, status, error, started, final=final_attempt)
            if error:
                raise WebhookUnreachable(f"webhook {webhook_id}: {error}")
            delivered += len(events)
            batches += 1
    result = {"delivered": delivered, "batches": batches}
    # Events committed while the lock was held, or a backlog longer than one run: the next run.
    behind = Webhook.objects.filter(pk=webhook_id, active=True).values_list("agent_id", "delivered_seq").first()
    if behind and events_last_seq(agent_id=behind[0]) > behind[1]:
        webhooks_wake(agent_id=behind[0])
        result["more"] = True
    return result


def webhook_behind(*, webhook: Webhook) -> int:
    """Events of its agent not delivered yet (the admin shows it)."""
    return max(0, events_last_seq(agent_id=webhook.agent_id) - webhook.delivered_seq)
