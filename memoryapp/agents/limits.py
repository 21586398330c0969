"""Abuse limits of agent keys, kept in Redis so they hold across web processes and hosts:

- a request rate per key: a token bucket (`capacity` tokens, refilled at `per_minute / 60` a
  second), taken and refilled in one Lua script, so concurrent requests never both take the
  last token;
- concurrent heavy requests per key (context builds, searches): a sorted set of the requests in
  progress, each with its start time; a slot older than HEAVY_SLOT_SECONDS (a process killed
  mid-request never gave it back) no longer counts;
- failed key uses (an unknown or revoked key), counted per minute, so the audit records a flood
  of bad keys as a handful of rows with counts (`agent_key_failure_count`);
- failed authentications per client address and per key prefix (`auth_failures_wait`,
  `auth_failure_count`): past API_AUTH_FAILURES_PER_MINUTE in a window, that address, or any key
  of that prefix, is refused before the key is looked up until the window ends, so keys cannot be
  guessed at the speed of the API (issue 23: 500 random keys in 5.8 s, 300 wrong secrets on one
  real prefix in 2.7 s, none refused).

Redis away: the limits fail open (the request is served) with a warning in the log, at most
one every BREAKER_SECONDS, and Redis is not asked again for that long, so every request does
not wait out a connection timeout.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings

from governance.jobs.redis_io import redis_command
from memoryapp.models import Agent, AgentKey

logger = logging.getLogger(__name__)

BREAKER_SECONDS = 5.0
PREFIX = "limits:"

_TOKEN_BUCKET = """
local capacity = tonumber(ARGV[1])
local per_second = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or capacity
local at = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * per_second)
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = (1 - tokens) / per_second
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / per_second) + 1)
return {allowed, tostring(wait)}
"""

_SLOT_TAKE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) + 1)
return 1
"""

_clients: dict[tuple[str, float], redis.Redis] = {}
_client_lock = threading.Lock()
_broken_until = 0.0


def limits_redis() -> redis.Redis:
    """This process's client of the limits' Redis (REDIS_URL), with short timeouts."""
    url, timeout = settings.REDIS_URL, settings.API_LIMITS_REDIS_TIMEOUT
    with _client_lock:
        client = _clients.get((url, timeout))
        if client is None:
            client = _clients[(url, timeout)] = redis.Redis.from_url(
                url, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        return client


def _script_run(source: str, numkeys: int, *keys_and_arguments: Any) -> Any:
    """Run a Lua script by its SHA1 (EVALSHA): EVAL sends the text (the gate's is ~1.5 kB) and Redis
    hashes it on every request. A Redis that does not hold it (restarted, flushed) gets it by EVAL,
    which also keeps it for the next call. EVALSHA goes without redis-py's layers of a command
    (`redis_command`: the gate is a round trip of every agent request)."""
    client = limits_redis()
    try:
        return redis_command(client, "EVALSHA", _script_sha(source), numkeys, *keys_and_arguments)
    except redis.exceptions.NoScriptError:
        return client.eval(source, numkeys, *keys_and_arguments)  # type: ignore[no-untyped-call]


@functools.cache
def _script_sha(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()  # Redis names a script by its SHA1


def _available() -> bool:
    return time.monotonic() >= _broken_until


def _failed(what: str, error: Exception) -> None:
    global _broken_until
    _broken_until = time.monotonic() + BREAKER_SECONDS
    logger.warning(
        "limits: Redis is unavailable (%s: %s); %s fails open for %.0f s", what, error, what, BREAKER_SECONDS
    )


def limits_breaker_reset() -> None:
    """Ask Redis again at once (tests, and after an operator fixed it)."""
    global _broken_until
    _broken_until = 0.0


# --- the request rate --------------------------------------------------------------------------


@dataclass(frozen=True)
class RateLimit:
    per_minute: int  # 0: no limit
    burst: int


def rate_limit_of(agent: Agent) -> RateLimit:
    per_minute = agent.rate_limit_per_minute
    burst = agent.rate_limit_burst
    return RateLimit(
        per_minute=settings.API_RATE_PER_MINUTE if per_minute is None else per_minute,
        burst=settings.API_RATE_BURST if burst is None else burst,
    )


def rate_take(*, key: AgentKey, agent: Agent) -> float | None:
    """Take one request from the key's bucket: None when it may go on, else the seconds until a
    token is back. Redis away: None (fail open)."""
    limit = rate_limit_of(agent)
    if limit.per_minute <= 0 or not _available():
        return None
    capacity = max(1, limit.burst)
    try:
        allowed, wait = _script_run(_TOKEN_BUCKET, 1, f"{PREFIX}rate:{key.pk}", capacity, limit.per_minute / 60.0)
    except redis.RedisError as error:
        _failed("the request rate limit", error)
        return None
    return None if int(allowed) else float(wait)


# --- concurrent heavy requests -----------------------------------------------------------------


def heavy_cap_of(agent: Agent) -> int:
    return settings.API_HEAVY_CONCURRENCY if agent.heavy_concurrency is None else agent.heavy_concurrency


def heavy_slot_take(*, key: AgentKey, agent: Agent) -> str | bool | None:
    """Take a slot for one heavy request of the key: its token (give it back with
    `heavy_slot_give`), False when the key holds its cap already, None when no slot is counted
    (no cap, or Redis away: fail open)."""
    cap = heavy_cap_of(agent)
    if cap <= 0 or not _available():
        return None
    token = secrets.token_hex(8)
    try:
        taken = _script_run(_SLOT_TAKE, 1, f"{PREFIX}heavy:{key.pk}", cap, settings.API_HEAVY_SLOT_SECONDS, token)
    except redis.RedisError as error:
        _failed("the heavy request cap", error)
        return None
    return token if int(taken) else False


def heavy_slot_give(*, key: AgentKey, token: str) -> None:
    try:
        limits_redis().zrem(f"{PREFIX}heavy:{key.pk}", token)
    except redis.RedisError as error:  # the slot ages out after API_HEAVY_SLOT_SECONDS
        _failed("the heavy request cap", error)


# --- failed key uses -----------------------------------------------------------------------------


def agent_key_failure_count(*, scope: str, window: str) -> int | None:
    """Count one failed key use in `scope` (a key's prefix, or "unknown") within the minute
    `window`: the count so far, or None when Redis is away."""
    if not _available():
        return None
    name = f"{PREFIX}badkey:{scope}:{window}"
    try:
        pipe = limits_redis().pipeline(transaction=True)
        pipe.incr(name)
        pipe.expire(name, 120)
        count, _ = pipe.execute()
    except redis.RedisError as error:
        _failed("the failed key count", error)
        return None
    return int(count)


# --- failed authentication -------------------------------------------------------------------------

# The longest wait (ms) of the counters in KEYS that reached the limit ARGV[1]; 0: none did.
_FAILURES_WAIT = """
local wait = 0
for _, name in ipairs(KEYS) do
  if tonumber(redis.call('GET', name) or '0') >= tonumber(ARGV[1]) then
    local ttl = redis.call('PTTL', name)
    if ttl > wait then wait = ttl end
  end
end
return wait
"""

# One more failure in each counter of KEYS (their counts); a counter's window (ARGV[1] ms) starts at its first.
_FAILURES_COUNT = """
local counts = {}
for i, name in ipairs(KEYS) do
  counts[i] = redis.call('INCR', name)
  if counts[i] == 1 then
    redis.call('PEXPIRE', name, ARGV[1])
  end
end
return counts
"""

AUTH_FAILURE_WINDOW_SECONDS = 60


def _auth_failure_names(*, address: str, prefix: str) -> list[str]:
    names = [f"{PREFIX}authfail:addr:{address}"] if address else []
    if prefix:
        names.append(f"{PREFIX}authfail:key:{prefix}")
    return names


def failures_wait(*, names: list[str], limit: int, what: str) -> float | None:
    """The seconds until the counters `names` that reached `limit` age out, None when none did.
    No limit (0), no counter, or Redis away: None (fail open)."""
    if limit <= 0 or not names or not _available():
        return None
    try:
        wait_ms = int(_script_run(_FAILURES_WAIT, len(names), *names, limit))
    except redis.RedisError as error:
        _failed(what, error)
        return None
    return wait_ms / 1000 if wait_ms > 0 else None


def failures_count(*, names: list[str], window_seconds: int, what: str) -> list[int] | None:
    """One more failure in each counter (a counter's window starts at its first failure): their
    counts, or None when Redis is away."""
    if not names or not _available():
        return None
    try:
        counts = _script_run(_FAILURES_COUNT, len(names), *names, window_seconds * 1000)
    except redis.RedisError as error:
        _failed(what, error)
        return None
    return [int(count) for count in counts]  # type: ignore[union-attr]


def failures_clear(*, names: list[str], what: str) -> None:
    if not names or not _available():
        return
    try:
        limits_redis().delete(*names)
    except redis.RedisError as error:
        _failed(what, error)


def auth_failures_wait(*, address: str, prefix: str) -> float | None:
    """Whether a key may be tried from `address` (the client's) with `prefix` (the key's visible
    part, "" when the text sent has none): None when it may, else the seconds until the address's
    or the prefix's failures of the window age out (API_AUTH_FAILURES_PER_MINUTE reached). Off (0)
    or Redis away: None (fail open)."""
    return failures_wait(
        names=_auth_failure_names(address=address, prefix=prefix),
        limit=settings.API_AUTH_FAILURES_PER_MINUTE,
        what="the failed authentication limit",
    )


def auth_failure_count(*, address: str, prefix: str) -> None:
    """Count one failed authentication against the address and the key prefix (see `auth_failures_wait`)."""
    if settings.API_AUTH_FAILURES_PER_MINUTE > 0:
        failures_count(
            names=_auth_failure_names(address=address, prefix=prefix),
            window_seconds=AUTH_FAILURE_WINDOW_SECONDS,
            what="the failed authentication limit",
        )


# --- one round trip per request: the failures, the keys' version and the rate --------------------

KEYS_VERSION_NAME = f"{PREFIX}keys-version"

# KEYS: the failure counters to check, then the keys' version, then (when ARGV[3] > 0) the key's
# bucket. ARGV: the failures limit (0: none), the number of failure counters, the bucket's capacity
# (0: take no token), its refill a second, the version the caller's cached lookup was made at.
# Returns {failures wait ms, version, token taken (1/0; -1: not asked), wait for a token}. A token
# is taken only when the version is the caller's: a changed key or agent is looked up again first.
_GATE = """
local limit = tonumber(ARGV[1])
local counters = tonumber(ARGV[2])
local wait_ms = 0
if limit > 0 then
  for i = 1, counters do
    if tonumber(redis.call('GET', KEYS[i]) or '0') >= limit then
      local ttl = redis.call('PTTL', KEYS[i])
      if ttl > wait_ms then wait_ms = ttl end
    end
  end
end
local version = redis.call('GET', KEYS[counters + 1])
if not version then
  local clock = redis.call('TIME')
  version = tostring(clock[1] .. string.format('%06d', tonumber(clock[2])))
  redis.call('SET', KEYS[counters + 1], version, 'NX')
  version = redis.call('GET', KEYS[counters + 1])
end
if wait_ms > 0 or tonumber(ARGV[3]) <= 0 or version ~= ARGV[5] then
  return {wait_ms, version, -1, '0'}
end
local capacity = tonumber(ARGV[3])
local per_second = tonumber(ARGV[4])
local bucket = KEYS[counters + 2]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', bucket, 'tokens', 'at')
local tokens = tonumber(state[1]) or capacity
local at = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * per_second)
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = (1 - tokens) / per_second
end
redis.call('HSET', bucket, 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', bucket, math.ceil(capacity / per_second) + 1)
return {wait_ms, version, allowed, tostring(wait)}
"""


@dataclass(frozen=True)
class Gate:
    """What one round trip to Redis tells an agent request before its key is trusted.

    `failures_wait`: seconds until the address's or prefix's failed authentications age out (None:
    it may try). `version`: the keys' version (None: Redis away, so no cached lookup may be used).
    `rate`: the key's token bucket, asked for only when the caller's cached lookup was made at
    `version`: None when not asked, else the seconds to wait (0.0: a token was taken)."""

    failures_wait: float | None
    version: str | None
    rate: float | None


def request_gate(
    *, address: str, prefix: str, key: AgentKey | None = None, agent: Agent | None = None, version: str = ""
) -> Gate:
    """`auth_failures_wait`, the keys' version and (with `key`, `agent` and the `version` their
    lookup was cached at) `rate_take`, in one Lua script. Redis away: all open, no version."""
    if not _available():
        return Gate(None, None, None)
    if _bump_owed:
        # A change this process made while Redis was away: every process's cached lookups of the
        # version before it are stale, so the version moves before any of them may be used again.
        keys_version_bump()
        if _bump_owed:
            return Gate(None, None, None)
    names = _auth_failure_names(address=address, prefix=prefix)
    capacity, per_second = 0, 0.0
    if key is not None and agent is not None:
        limit = rate_limit_of(agent)
        if limit.per_minute > 0:
            capacity, per_second = max(1, limit.burst), limit.per_minute / 60.0
    keys = [*names, KEYS_VERSION_NAME]
    if capacity and key is not None:
        keys.append(f"{PREFIX}rate:{key.pk}")
    arguments: list[int | float | str] = [
        settings.API_AUTH_FAILURES_PER_MINUTE,
        len(names),
        capacity,
        per_second,
        version,
    ]
    try:
        wait_ms, found, allowed, wait = _script_run(_GATE, len(keys), *keys, *arguments)
    except redis.RedisError as error:
        _failed("the request limits", error)
        return Gate(None, None, None)
    found_version = found.decode() if isinstance(found, bytes) else str(found)
    failures = int(wait_ms) / 1000 if int(wait_ms) > 0 else None
    rate = None if int(allowed) < 0 else (0.0 if int(allowed) else float(wait))
    # A key with no rate limit asked for no token: it passes as if it had taken one.
    if key is not None and agent is not None and not capacity and found_version == version and failures is None:
        rate = 0.0
    return Gate(failures, found_version, rate)


# A version that is missing (a Redis that lost its data, or a new one) starts from the clock, as
# `_GATE` starts it: a lookup kept at a version of before the loss never matches one after it.
_BUMP = """
if not redis.call('GET', KEYS[1]) then
  local clock = redis.call('TIME')
  redis.call('SET', KEYS[1], tostring(clock[1] .. string.format('%06d', tonumber(clock[2]))), 'NX')
end
return redis.call('INCR', KEYS[1])
"""

_bump_owed = False


def keys_version_bump() -> None:
    """Every cached key lookup (memoryapp.agents.keycache) is stale from now on, in every process.
    Asked even while the breaker rests (a change is rare, a stale key is not). Redis away: no
    process uses its cache while it is (`request_gate`, and each drops its lookups when it sees
    that), and the bump is owed: this process's next `request_gate` makes it before reading the
    version, so a lookup cached before the change is not trusted again once Redis is back."""
    global _bump_owed
    try:
        _script_run(_BUMP, 1, KEYS_VERSION_NAME)
    except redis.RedisError as error:
        _bump_owed = True
        _failed("the keys' version", error)
    else:
        _bump_owed = False
