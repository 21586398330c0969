"""Webhooks: an agent's events POSTed to a URL an operator set, signed, in order, at least once.

Delivery (the job `memoryapp.tasks.webhook_deliver`, one run per webhook at a time):

1. A commit that recorded events of an agent with an active webhook wakes it (debounced: one run
   pending per webhook); the sweep (beat, every minute) wakes every webhook left behind (a broker
   that was away, a process that had not seen the webhook yet, the end of a pause).
2. The run holds the webhook's advisory lock (one deliverer at a time, so batches go in order),
   reads the events after `delivered_seq`, at most WEBHOOK_BATCH, and POSTs them as JSON, signed:
   `X-Memory-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`.
3. A 2xx moves `delivered_seq` to the batch's last event and the next batch goes; anything else
   (a status, a timeout, a refused connection, a redirect: never followed) is recorded as a failed attempt
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
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, LocationParseError, NameResolutionError, NewConnectionError
from urllib3.util import parse_url
from urllib3.util.connection import create_connection

from governance import locks
from governance.audit.chain import audit_append
from governance.jobs.broker import job_enqueue_debounced
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


# IPv6 prefixes whose addresses carry an IPv4 address in their last 32 bits, which a translator
# (NAT64: RFC 6052's well-known prefix and RFC 8215's local-use one) or the stack delivers to:
# `[64:ff9b::a9fe:a9fe]` is the cloud metadata address wherever NAT64 runs. Python counts the
# well-known prefix as global, so the IPv4 address inside is judged instead.
_IPV4_TRANSLATED = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
# IPv4-compatible addresses (`::127.0.0.1`, deprecated by RFC 4291): never a receiver.
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped, 6to4, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in network for network in _IPV4_TRANSLATED):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_is_public(address: str) -> bool:
    """Whether an IP address is a public one (not loopback, private, link-local, shared, reserved,
    multicast or unspecified). An IPv6 address that carries an IPv4 address (IPv4-mapped, 6to4,
    NAT64) is judged as that IPv4 address too; an IPv4-compatible one is never public (Teredo's
    2001::/32 is not global by itself)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _IPV4_COMPATIBLE:
            return False
        inner = _embedded_ipv4(ip)
        if inner is not None and not (inner.is_global and not inner.is_multicast):
            return False
        if ip.ipv4_mapped is not None:
            return True  # judged as its IPv4 address (::ffff:0:0/96 itself is not global)
    return ip.is_global and not ip.is_multicast


def _private_host(hostname: str) -> bool:
    """A host that names a non-public address by itself (an IP literal, localhost): refused when set."""
    name = hostname.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False  # a name: checked once resolved, at each connection (_CheckedConnection)
    return not address_is_public(name)


def _numeric_host(hostname: str) -> bool:
    """A host the resolver reads as an IPv4 address although it is not written as one: 2130706433,
    0x7f.1, 127.1, 017700000001 (inet_aton's old forms) all mean 127.0.0.1."""
    try:
        socket.inet_aton(hostname)
    except (OSError, ValueError):
        return False
    try:
        ipaddress.IPv4Address(hostname)
    except ValueError:
        return True
    return False


def _url_refused(code: str, message: str) -> DomainError:
    return DomainError(code, message, field="url")


def webhook_url_check(url: str) -> str:
    """An http(s) URL with a host, read by the parser the HTTP client uses (urllib3's, as requests
    does), so the host checked is the host connected to; unless WEBHOOK_ALLOW_PRIVATE_URLS, not one
    naming a non-public address (a DomainError naming `url`).

    Refused whatever the setting: user info (`user:password@host`: `http://127.0.0.1:8799\\@1.1.1.1/`
    was read as host 1.1.1.1 by one parser and delivered to 127.0.0.1 by the other), backslashes,
    spaces and control characters, a host that is not plain ASCII or holds a %-escape, and a number
    the resolver would read as an address (`2130706433`). What a parser might still read otherwise
    is caught at the connection: the address connected to is the one checked (`_CheckedConnection`).
    """
    if not isinstance(url, str) or not url:
        raise _url_refused("invalid_url", "A webhook URL is an http or https URL.")
    if any(ch == "\\" or ch.isspace() or not ch.isprintable() for ch in url):
        raise _url_refused(
            "invalid_url", "A webhook URL holds no backslash, space or control character (escape them with %XX)."
        )
    try:
        parts = parse_url(url)
    except LocationParseError:
        raise _url_refused("invalid_url", "A webhook URL is an http or https URL.") from None
    if parts.scheme not in ("http", "https") or not parts.host:
        raise _url_refused("invalid_url", "A webhook URL is an http or https URL.")
    if parts.auth is not None or "@" in (parts.netloc or ""):
        raise _url_refused(
            "userinfo_in_url",
            "A webhook URL carries no user name or password before its host (user:password@host); the "
            "receiver checks the X-Memory-Signature header instead.",
        )
    host = parts.host
    if "%" in host or not host.isascii():
        raise _url_refused("invalid_url", "A webhook URL's host is plain ASCII (an international name in punycode).")
    if _numeric_host(host):
        raise _url_refused("invalid_url", "A webhook URL's IPv4 address is written as four decimal numbers.")
    # The standard library's reading must agree (the admin and audit show urlsplit's host).
    try:
        split = urlsplit(url)
        same = (split.hostname or "") == host.strip("[]").lower() and split.port == parts.port
    except ValueError:
        same = False
    if not same:
        raise _url_refused("invalid_url", "A webhook URL must name its host in one way only.")
    if not settings.WEBHOOK_ALLOW_PRIVATE_URLS and _private_host(host):
        raise _url_refused(
            "private_url",
            "A webhook URL must reach a public address, not localhost or a private, loopback or "
            "link-local one (WEBHOOK_ALLOW_PRIVATE_URLS allows them).",
        )
    return url


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


class _DestinationRefused(NewConnectionError):
    """The address a connection would go to is not a public one (and private ones are not allowed)."""

    def __init__(self, conn: HTTPConnection, reason: str) -> None:
        super().__init__(conn, reason)
        self.reason = reason


def _addresses_checked(conn: HTTPConnection, host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, now, each a public one unless WEBHOOK_ALLOW_PRIVATE_URLS:
    what the connection goes to, so a name re-pointed since the URL was set (DNS rebinding) or a URL
    some parser reads otherwise never reaches a private address."""
    name = host.strip("[]")
    try:
        found = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NameResolutionError(host, conn, exc) from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    public = bool(addresses) and all(address_is_public(address) for address in addresses)
    if not public and not settings.WEBHOOK_ALLOW_PRIVATE_URLS:
        raise _DestinationRefused(conn, f"refused: {name} resolves to an address that is not public")
    return addresses


class _CheckedConnection(HTTPConnection):
    """urllib3's connection, connecting only to the addresses `_addresses_checked` allows (resolved
    once, then connected to by number: what was checked is what is reached). TLS still checks the
    certificate against the URL's name (the host, not the number, is what the connection is for)."""

    def _new_conn(self) -> socket.socket:
        failure: OSError | None = None
        for address in _addresses_checked(self, self._dns_host, self.port):
            try:
                sock = create_connection(
                    (address, self.port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except TimeoutError as exc:
                raise ConnectTimeoutError(self, f"Connection to {self.host} timed out.") from exc
            except OSError as exc:
                failure = exc
                continue
            sys.audit("http.client.connect", self, self.host, self.port)
            return sock
        raise NewConnectionError(self, f"Failed to establish a new connection: {failure}")


class _CheckedHTTPSConnection(_CheckedConnection, HTTPSConnection):
    pass


class _CheckedPool(HTTPConnectionPool):
    ConnectionCls = _CheckedConnection


class _CheckedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _CheckedHTTPSConnection


class _CheckedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _CheckedPool, "https": _CheckedHTTPSPool}


def delivery_session() -> requests.Session:
    """The HTTP session deliveries are made with: its connections checked (`_CheckedConnection`)."""
    session = requests.Session()
    # No proxy, no .netrc credentials from the worker's environment: the connection is the one checked.
    session.trust_env = False
    session.mount("http://", _CheckedAdapter())
    session.mount("https://", _CheckedAdapter())
    return session


def _status_reason(status: int) -> str:
    """What operators read for a status other than 2xx: the status and its standard name, never the
    receiver's body (an internal service's reply would be shown in the admin and the worker log)."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    text = f"HTTP {status}" + (f" {phrase}" if phrase else "")
    if 300 <= status < 400:
        text += " (redirects are not followed)"
    return text


def delivery_failure_reason(exc: requests.RequestException) -> str:
    """A short reason for a delivery that got no answer; the refusal of an address says which host."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:  # requests -> urllib3's MaxRetryError -> its reason
        seen.add(id(cause))
        if isinstance(cause, _DestinationRefused):
            return cause.reason
        inner = getattr(cause, "reason", None)
        cause = inner if isinstance(inner, BaseException) else cause.__cause__ or cause.__context__
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS failed (the receiver's certificate or handshake)"
    if isinstance(exc, requests.ConnectionError):
        return "could not connect"
    return f"the request failed ({type(exc).__name__})"


def _post(webhook: Webhook, body: bytes) -> tuple[int | None, str]:
    """POST the body; (status, error text) where error is "" for a 2xx. The receiver's answer is
    never read (`stream`): only its status counts, and only the status is recorded."""
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "memory-governance-webhooks/1",
        "X-Memory-Webhook-Id": str(webhook.pk),
        SIGNATURE_HEADER: webhook_signature(secret=webhook.secret, timestamp=timestamp, body=body),
    }
    try:
        # The stored URL as the service would take it now (a row set before a check was added).
        webhook_url_check(webhook.url)
    except DomainError as exc:
        return None, f"refused: {exc.message}"
    try:
        with (
            delivery_session() as session,
            session.post(
                webhook.url,
                data=body,
                headers=headers,
                timeout=settings.WEBHOOK_TIMEOUT,
                allow_redirects=False,
                stream=True,
            ) as response,
        ):
            status = response.status_code
    except requests.RequestException as exc:
        return None, delivery_failure_reason(exc)
    if 200 <= status < 300:
        return status, ""
    return status, _status_reason(status)


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
