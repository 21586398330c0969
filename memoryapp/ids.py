"""Identifiers of the objects agents see: a short prefix and a time-ordered random part, or the
client's own id, which must follow one rule (`client_id_check`)."""

import functools
import hashlib
import hmac
import os
import re
import threading
import time
from typing import Any

from django.conf import settings
from django.utils.encoding import force_str

from memoryapp.errors import DomainError

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford's base32, lower case

# The columns hold at most this many characters.
MAX_THREAD_ID = 128
MAX_ENTRY_ID = 40

# Characters a URL path segment carries as themselves (RFC 3986 unreserved, plus `:` `@` `+`):
# an id is always reachable at /threads/{id} or /entries/{id} without encoding, and prints
# plainly in a log line or an admin page. No `/` (it would split the path), no `%`, no space,
# no control character (a newline in an id broke the admin's links).
_ID_CHARACTERS = re.compile(r"[A-Za-z0-9_.~:@+-]+")
# Path segments that clients normalise away, and words a route takes before `threads/{id}`.
_NOT_AN_ID = {".", ".."}
RESERVED_THREAD_IDS = frozenset({"import"})


def new_id(prefix: str) -> str:
    """`<prefix>_` + 10 characters of milliseconds + 16 random characters (sortable by creation)."""
    return f"{prefix}_{_millis_head(int(time.time() * 1000))}{_random_tail()}"


# Two characters of ten bits, most significant first (`_HIGH_FIRST`) and least (`_LOW_FIRST`): an id's
# parts are written two characters a step (the loop of one a step was a tenth of a batch's entries).
_HIGH_FIRST = [_ALPHABET[bits >> 5] + _ALPHABET[bits & 31] for bits in range(1024)]
_LOW_FIRST = [_ALPHABET[bits & 31] + _ALPHABET[bits >> 5] for bits in range(1024)]


@functools.lru_cache(maxsize=4)
def _millis_head(millis: int) -> str:
    """The 10 characters of a millisecond (its lowest 50 bits), most significant first; made once for
    the ids of that millisecond (a batch of 1,000 entries takes a few)."""
    return "".join(_HIGH_FIRST[(millis >> shift) & 1023] for shift in (40, 30, 20, 10, 0))


# Random bytes are drawn this many ids at a time: os.urandom lets go of the GIL for its system call,
# and drawn once an id, a thread of a busy web process waited to take it back after each entry of a
# batch (~40% of the samples of building a batch's entries, issue 26).
_RANDOM_IDS_AT_ONCE = 64
_random = threading.local()


def _random_tail() -> str:
    """16 characters of 80 random bits of os.urandom, drawn for `_RANDOM_IDS_AT_ONCE` ids at a time
    by each thread (a forked child draws its own: `_random_forget`)."""
    pool, at = getattr(_random, "pool", (b"", 0))
    if at == len(pool):
        pool, at = os.urandom(10 * _RANDOM_IDS_AT_ONCE), 0
    _random.pool = (pool, at + 10)
    bits = int.from_bytes(pool[at : at + 10], "big")
    # Written out, not a loop: the generator's steps were half of making the tail (issue 26).
    high = _HIGH_FIRST
    return (
        high[bits >> 70]
        + high[(bits >> 60) & 1023]
        + high[(bits >> 50) & 1023]
        + high[(bits >> 40) & 1023]
        + high[(bits >> 30) & 1023]
        + high[(bits >> 20) & 1023]
        + high[(bits >> 10) & 1023]
        + high[bits & 1023]
    )


def _random_forget() -> None:
    """In a forked child (gunicorn's and Celery's workers): the bytes its parent drew are its parent's
    ids, never the child's."""
    global _random
    _random = threading.local()


os.register_at_fork(after_in_child=_random_forget)


# Entry ids are one primary key for every agent, so an id one agent holds cannot be another's. An
# id the service makes for an agent carries a tag of that agent (`ENTRY_TAG_CHARS` characters of
# an HMAC keyed by SECRET_KEY over the agent and the rest of the id), which no other agent can make.
# An import keeps the node ids tagged for the importing agent (its own exports come back as they
# were) and stores every other id under one derived from it and the agent, the same each time, so
# two agents importing the same ids both succeed, and an import never tells whether another agent
# holds an id (issue 23). Ids made before the tags (untagged) stay valid; imported again, they are
# given a derived id too.
ENTRY_TAG_CHARS = 8
_ENTRY_TAG_SALT = "memoryapp.ids.entry"
_ENTRY_IMPORT_SALT = "memoryapp.ids.entry-import"


def _base32(digest: bytes, chars: int) -> str:
    """`chars` characters of the digest's lowest bits, least significant first."""
    bits = int.from_bytes(digest, "big")
    return "".join(_LOW_FIRST[(bits >> (10 * i)) & 1023] for i in range((chars + 1) // 2))[:chars]


@functools.lru_cache(maxsize=16)
def _hmac_key(salt: str, secret: str | bytes) -> bytes:
    """Django's `salted_hmac` key for `salt` under `secret`, derived once (not once per id)."""
    return hashlib.sha256((salt + force_str(secret)).encode()).digest()


@functools.lru_cache(maxsize=16)
def _hmac_pads(key: bytes) -> tuple[Any, Any]:
    """HMAC-SHA256's inner and outer hashes (RFC 2104) with the key's padded blocks taken in, made
    once per key: an HMAC is then two copies and updates of them. hmac.digest looks SHA-256 up in
    OpenSSL by name on every call, which cost three times the hashing (issue 26)."""
    if len(key) > 64:  # SHA-256's block
        key = hashlib.sha256(key).digest()
    key = key.ljust(64, b"\0")
    return hashlib.sha256(bytes(b ^ 0x36 for b in key)), hashlib.sha256(bytes(b ^ 0x5C for b in key))


def _hmac(salt: str, value: str, *, secret: str | bytes | None = None) -> bytes:
    """HMAC-SHA256 of `value` under `salt`'s key (what hmac.digest(key, value, "sha256") gives)."""
    inner, outer = _hmac_pads(_hmac_key(salt, settings.SECRET_KEY if secret is None else secret))
    inner = inner.copy()
    inner.update(value.encode())
    outer = outer.copy()
    outer.update(inner.digest())
    return outer.digest()


def _entry_tag(body: str, *, agent_id: int, secret: str | bytes | None = None) -> str:
    """ENTRY_TAG_CHARS (8) characters of the HMAC's lowest 40 bits, least significant first
    (`_base32(digest, 8)`, written out)."""
    bits = int.from_bytes(_hmac(_ENTRY_TAG_SALT, f"{agent_id}:{body}", secret=secret)[-5:], "big")
    low = _LOW_FIRST
    return low[bits & 1023] + low[(bits >> 10) & 1023] + low[(bits >> 20) & 1023] + low[bits >> 30]


def entry_id_new(*, agent_id: int) -> str:
    """A new entry id of the agent: `new_id("ent")` (sortable by creation) and the agent's tag."""
    body = new_id("ent")
    return body + _entry_tag(body, agent_id=agent_id)


def entry_id_is_agents(entry_id: str, *, agent_id: int) -> bool:
    """Whether the service made this id for this agent (its tag holds, under SECRET_KEY or a fallback)."""
    body, tag = entry_id[:-ENTRY_TAG_CHARS], entry_id[-ENTRY_TAG_CHARS:]
    if not body.startswith("ent_") or len(tag) != ENTRY_TAG_CHARS:
        return False
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return any(hmac.compare_digest(tag, _entry_tag(body, agent_id=agent_id, secret=key)) for key in secrets)


def entry_id_imported(client_id: str, *, agent_id: int) -> str:
    """The id an imported node of the agent is stored under: its own id when the service made it for
    this agent, else one derived from it and the agent (tagged, the same for every import of it)."""
    if entry_id_is_agents(client_id, agent_id=agent_id):
        return client_id
    body = "ent_" + _base32(_hmac(_ENTRY_IMPORT_SALT, f"{agent_id}:{client_id}"), 26)
    return body + _entry_tag(body, agent_id=agent_id)


def client_id_check(value: object, *, field: str, max_length: int, reserved: frozenset[str] = frozenset()) -> str:
    """`value` if it may be the id of a thread or an entry, else a 400 naming `field`.

    One rule for every id a client gives (create, import, fork): a non-empty string of at most
    `max_length` of the characters `A-Z a-z 0-9 _ . ~ : @ + -`, not `.` or `..`, not a reserved word.
    """
    if not isinstance(value, str):
        raise DomainError("invalid_type", f"{field} must be a string.", field=field)
    if not value:
        raise DomainError("invalid_value", f"{field} must not be empty.", field=field)
    if len(value) > max_length:
        raise DomainError("too_long", f"{field} is longer than {max_length} characters.", field=field)
    if not _ID_CHARACTERS.fullmatch(value) or value in _NOT_AN_ID:
        raise DomainError(
            "invalid_id",
            f"{field} may hold only letters, digits and _ . ~ : @ + - (and is not . or ..).",
            field=field,
        )
    if value in reserved:
        raise DomainError("invalid_id", f"{field} must not be {value!r}: a route has that name.", field=field)
    return value


# A person id (`user_id`) holds at most this many characters.
MAX_PERSON_ID = 128


def person_id_check(value: object, *, field: str = "user_id") -> str:
    """`value` if it may name a person (`user_id`), else a 400 naming `field`; "" (no person) passes.

    One rule wherever a person id comes in (a thread's, an item's, a fact tool's, a memory-file
    scope's, an MCP connection's, an import's, a message's `metadata.userId`, the admin's), so every
    person the service stores is one `POST /api/v1/users/{user_id}/forget` reaches (issue 23: a `/`
    or a newline, accepted elsewhere, made a person unreachable by that route):

    - at most 128 characters, every one printable (no newline, tab or other control character);
    - no `/` (it would split the path), not `.` or `..` (path segments clients normalise away);
    - no space at either end (a client's form trims it, the path would not).

    Spaces inside, `@`, `+`, `%` and letters of any script are kept: person ids are often e-mail
    addresses or names, and a client percent-encodes them in the path.
    """
    if not isinstance(value, str):
        raise DomainError("invalid_type", f"{field} must be a string.", field=field)
    if len(value) > MAX_PERSON_ID:
        raise DomainError("too_long", f"{field} is longer than {MAX_PERSON_ID} characters.", field=field)
    if value and (not value.isprintable() or "/" in value or value in _NOT_AN_ID or value.strip() != value):
        raise DomainError(
            "invalid_person_id",
            f"{field} must be printable characters without `/` (no newline or other control character, "
            "no space at either end, not . or ..): a person id must be one /users/{user_id}/forget can name.",
            field=field,
        )
    return value


def thread_id_check(value: object, *, field: str = "id") -> str:
    return client_id_check(value, field=field, max_length=MAX_THREAD_ID, reserved=RESERVED_THREAD_IDS)


def entry_id_check(value: object, *, field: str = "id") -> str:
    return client_id_check(value, field=field, max_length=MAX_ENTRY_ID)
