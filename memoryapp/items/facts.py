"""Facts (002 `Storage.remember / recall / search / forgetAll`): namespaced key/value memory with a TTL.

Facts are not a second store: each key is the slot `core:<key>` of `system` memory items whose
subject (and `namespace`) is the namespace, as 004 keeps its core facts. So a new value supersedes
the one before with history kept, the same value again changes nothing, and facts reach a
context like any other item. A namespace `users/<id>` (and anything inside it) is scoped to that
person (`user_id`), which is how `Memory.byState("user_id", "users")` sees one person's facts;
other namespaces are shared by every run of the agent (`Memory.shared`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from governance.audit.chain import audit_append
from governance.crypto.fields import words_hashes
from governance.crypto.keyring import encryption_enabled
from memoryapp.errors import DomainError, NotFound
from memoryapp.events.services import event_record
from memoryapp.items.purposes import purpose_q, recall_purpose_check
from memoryapp.items.rules import Scope
from memoryapp.items.selectors import FACT_PREFIX, holding_q
from memoryapp.items.services import item_forget, item_state_write
from memoryapp.models import Agent, MemoryItem
from memoryapp.models.choices import ItemKind, Trust

MAX_VALUE_BYTES = 1024 * 1024  # 1 MiB of JSON text (002)
MAX_NAMESPACE_CHARS = 500
MAX_KEY_CHARS = 250
MAX_TTL_SECS = 100 * 365 * 24 * 3600
DEFAULT_SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 1000
PERSON_PREFIX = "users"

# Common words a query ignores (002: "common words such as 'the' are ignored").
_STOP_TEXT = """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves"""
STOP_WORDS = frozenset(_STOP_TEXT.split())
_WORD = re.compile(r"\w+", re.UNICODE)


# How facts are searched (002 `Memory.semantic`): by their words, by meaning, or both (the default).
SEARCH_MODES = ("hybrid", "keyword", "semantic")
# A fact found by meaning needs this cosine with the query (as recall's turns and items do).
FACT_MIN_SIMILARITY = 0.3

# Finds facts by meaning: (the facts to look in, the query, how many) -> [(item id, cosine)], best
# first; raises when the embedder fails. Search sits above items, so memoryapp.apps provides it.
MeaningFinder = Callable[[QuerySet[MemoryItem], str, int], list[tuple[str, float]]]
_meaning_finder: MeaningFinder | None = None


def facts_by_meaning_provide(finder: MeaningFinder | None) -> None:
    global _meaning_finder
    _meaning_finder = finder


@dataclass(frozen=True)
class FactHit:
    fact: dict[str, Any]
    score: float | None
    # The channels that found it: "keyword" (its words), "vector" (its meaning); empty without a query.
    matched_by: tuple[str, ...] = ()


class FactHits(list[FactHit]):
    """What a search found, best first, and how: the mode it ran in (a semantic search whose
    embedder failed falls back to keywords, 002) and why it fell back."""

    def __init__(
        self, hits: Iterable[FactHit] = (), *, mode: str = "keyword", errors: list[dict[str, str]] | None = None
    ):
        super().__init__(hits)
        self.mode = mode
        self.errors = errors or []


def namespace_check(namespace: Any, field: str = "namespace") -> str:
    """A namespace is non-empty segments separated by "/"; the root "" is refused."""
    if not isinstance(namespace, str) or not namespace:
        raise DomainError("invalid_value", "namespace must be a non-empty path such as users/42.", field=field)
    if len(namespace) > MAX_NAMESPACE_CHARS:
        raise DomainError("invalid_value", f"namespace holds at most {MAX_NAMESPACE_CHARS} characters.", field=field)
    segments = namespace.split("/")
    if any(not s or s != s.strip() or any(ord(c) < 32 for c in s) for s in segments):
        raise DomainError(
            "invalid_value",
            "namespace must be non-empty segments separated by / (no empty segment, no surrounding spaces).",
            field=field,
        )
    return namespace


def key_check(key: Any, field: str = "key") -> str:
    if not isinstance(key, str) or not key.strip():
        raise DomainError("invalid_value", "key must be a non-empty string.", field=field)
    if len(key) > MAX_KEY_CHARS or "/" in key or any(ord(c) < 32 for c in key) or key != key.strip():
        raise DomainError(
            "invalid_value",
            f"key must be at most {MAX_KEY_CHARS} characters, without / or control characters or surrounding spaces.",
            field=field,
        )
    return key


def value_text(value: Any) -> str:
    """The text of a fact's value: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _value_check(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise DomainError("invalid_value", "value must be a JSON value.", field="value") from exc
    if len(text.encode()) > MAX_VALUE_BYTES:
        raise DomainError("value_too_large", "value holds at most 1 MiB as JSON text.", field="value", status=413)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DomainError("invalid_value", "value must not be empty.", field="value")
    if "\x00" in text or "\\u0000" in text:
        raise DomainError("invalid_value", "value must not hold NUL characters.", field="value")
    return value_text(value)


def scope_of_namespace(namespace: str) -> Scope:
    """`users/<id>` and what is inside it belong to that person; other namespaces to every run."""
    segments = namespace.split("/")
    if len(segments) >= 2 and segments[0] == PERSON_PREFIX:
        return Scope(user_id=segments[1][:128])
    return Scope()


def _facts(*, agent: Agent) -> QuerySet[MemoryItem]:
    return MemoryItem.objects.filter(agent=agent, kind=ItemKind.FACT, attribute__startswith=FACT_PREFIX).exclude(
        namespace=""
    )


def _in_namespace(namespace: str, *, nested: bool) -> Q:
    if not nested:
        return Q(namespace=namespace)
    return Q(namespace=namespace) | Q(namespace__startswith=namespace + "/")


def facts_current(*, agent: Agent, namespace: str, nested: bool = False, purpose: str = "") -> QuerySet[MemoryItem]:
    """The values that hold now in a namespace (and those inside it with `nested`); expired ones are gone.
    With a `purpose`, only those collected for it or for none (memoryapp.items.purposes)."""
    return _facts(agent=agent).filter(_in_namespace(namespace, nested=nested)).filter(holding_q(), purpose_q(purpose))


def fact_dict(item: MemoryItem, *, created_at: datetime | None = None) -> dict[str, Any]:
    """A fact as 002's recall returns it."""
    out: dict[str, Any] = {
        "namespace": item.namespace,
        "key": item.attribute[len(FACT_PREFIX) :],
        "value": item.value_json if item.value_json is not None else item.value,
        "created_at_ms": _ms(created_at or item.recorded_at),
        "updated_at_ms": _ms(item.recorded_at),
    }
    if item.expires_at is not None:
        out["expires_at_ms"] = _ms(item.expires_at)
    if item.purposes:
        out["purposes"] = list(item.purposes)
    return out


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _first_recorded(*, agent: Agent, items: list[MemoryItem]) -> dict[tuple[str, str], datetime]:
    """When each fact's key was first written in its namespace (its history's oldest state)."""
    if not items:
        return {}
    wanted = Q()
    for item in items:
        wanted |= Q(namespace=item.namespace, attribute=item.attribute)
    firsts: dict[tuple[str, str], datetime] = {}
    rows = _facts(agent=agent).filter(wanted).values_list("namespace", "attribute", "recorded_at")
    for namespace, attribute, at in rows:
        key = (namespace, attribute)
        if key not in firsts or at < firsts[key]:
            firsts[key] = at
    return firsts


def fact_remember(
    *,
    agent: Agent,
    namespace: str,
    key: str,
    value: Any,
    ttl_secs: int | None = None,
    actor: str = "",
    purposes: list[str] | None = None,
) -> dict[str, Any]:
    """Save a fact, replacing the value under the same key (the same value again changes nothing but
    the purposes, when given: memoryapp.items.purposes)."""
    namespace = namespace_check(namespace)
    key = key_check(key)
    text = _value_check(value)
    expires_at = None
    if ttl_secs is not None:
        if isinstance(ttl_secs, bool) or not isinstance(ttl_secs, int) or not 0 < ttl_secs <= MAX_TTL_SECS:
            raise DomainError("invalid_value", "ttl_secs must be a positive whole number of seconds.", field="ttl_secs")
        expires_at = timezone.now() + timedelta(seconds=ttl_secs)
    item = item_state_write(
        agent=agent,
        kind=ItemKind.FACT,
        subject=namespace,
        attribute=FACT_PREFIX + key,
        value=text,
        trust=Trust.SYSTEM,
        scope=scope_of_namespace(namespace),
        value_json=value,
        namespace=namespace,
        expires_at=expires_at,
        use_entity=False,
        actor=actor,
        purposes=purposes,
    )
    return fact_recall(agent=agent, namespace=namespace, key=key) or fact_dict(item)


def _current(*, agent: Agent, namespace: str, key: str) -> MemoryItem | None:
    return (
        facts_current(agent=agent, namespace=namespace)
        .filter(attribute=FACT_PREFIX + key)
        .order_by("-valid_from", "-recorded_at")
        .first()
    )


def fact_recall(*, agent: Agent, namespace: str, key: str) -> dict[str, Any] | None:
    """One fact, or None when it is missing or expired."""
    namespace = namespace_check(namespace)
    key = key_check(key)
    item = _current(agent=agent, namespace=namespace, key=key)
    if item is None:
        return None
    first = _first_recorded(agent=agent, items=[item])
    return fact_dict(item, created_at=first.get((item.namespace, item.attribute)))


def fact_forget(*, agent: Agent, namespace: str, key: str, actor: str = "") -> dict[str, Any]:
    """Let a fact's current value go, keeping its history (004 CoreFactsStore.delete)."""
    namespace = namespace_check(namespace)
    key = key_check(key)
    item = _current(agent=agent, namespace=namespace, key=key)
    if item is None:
        raise NotFound("The fact")
    fact = fact_dict(item)
    item_forget(item=item, actor=actor)
    return fact


def significant_words(text: str) -> list[str]:
    """The words of a text a search counts: lower-cased, once each, common words left out."""
    return [w for w in dict.fromkeys(_WORD.findall(text.lower())) if w not in STOP_WORDS]


def fact_search(
    *,
    agent: Agent,
    namespace: str,
    text: str = "",
    limit: int = DEFAULT_SEARCH_LIMIT,
    purpose: str = "",
    mode: str = "hybrid",
) -> FactHits:
    """Facts of a namespace and those inside it that hold the query's words, or say the same thing
    in other words (with a `purpose`, of the agent's list or a 400 naming it: only facts collected
    for it or for none).

    1. By words (`keyword`, 002 `search`): the query's words, lower-cased, common words left out; a
       fact matches when its key or the text of its value holds at least one of them as a word,
       scored by the share of the query's words it holds (0..1).
    2. By meaning (`semantic`, 002 `Memory.semantic`): the facts whose vector is nearest the query's,
       scored by their cosine, kept from FACT_MIN_SIMILARITY. Every fact an agent sees is one it
       saved (facts are scoped by agent first), so all of them are searched by meaning once the
       embedding job gave them a vector; one not embedded yet is found by its words only.
    3. `hybrid` (the default) takes both: a fact's score is the better of its two. A failing
       embedder leaves the words alone (the answer's mode says `keyword`, and why).
    4. Best first, then the newest. Without words (no text, or only common words), every fact,
       newest first, without a score.
    """
    namespace = namespace_check(namespace)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise DomainError("invalid_value", f"limit must be from 1 to {MAX_SEARCH_LIMIT}.", field="limit")
    if not isinstance(text, str):
        raise DomainError("invalid_value", "text must be a string.", field="q")
    if mode not in SEARCH_MODES:
        raise DomainError("invalid_value", f"mode must be one of: {', '.join(SEARCH_MODES)}.", field="mode")
    purpose = recall_purpose_check(agent=agent, purpose=purpose)
    current = facts_current(agent=agent, namespace=namespace, nested=True, purpose=purpose).defer(
        "embedding", "search_vector"
    )
    words = significant_words(text)
    near: list[tuple[str, float]] = []
    used, errors = mode, []  # errors: [{"source", "message"}], as the other searches answer them
    if text.strip() and mode != "keyword":
        try:
            if _meaning_finder is None:
                raise RuntimeError("no embedder is wired")
            near = [(pk, cos) for pk, cos in _meaning_finder(current, text, limit) if cos >= FACT_MIN_SIMILARITY]
        except Exception as exc:  # the embedder's failure: the words still answer (002)
            used = "keyword"
            errors.append({"source": "embedder", "message": f"found by words only: {exc}"[:300]})
    if not text.strip() or (not words and used == "keyword"):
        rows = list(current.order_by("-recorded_at", "-id")[:limit])
        firsts = _first_recorded(agent=agent, items=rows)
        hits = [FactHit(fact_dict(r, created_at=firsts.get((r.namespace, r.attribute))), None) for r in rows]
        return FactHits(hits, mode=used, errors=errors)
    scores: dict[str, float] = {}
    channels: dict[str, list[str]] = {}
    rows_by_id: dict[str, MemoryItem] = {}
    if words and used != "semantic":
        for row in current.filter(_rough_match(agent=agent, words=words)):
            held = set(_WORD.findall(f"{row.attribute[len(FACT_PREFIX) :]} {row.value}".lower()))
            matched = sum(1 for w in words if w in held)
            if matched:
                scores[row.pk] = matched / len(words)
                channels[row.pk] = ["keyword"]
                rows_by_id[row.pk] = row
    missing = [pk for pk, _ in near if pk not in rows_by_id]
    if missing:
        rows_by_id.update({r.pk: r for r in current.filter(pk__in=missing)})
    for pk, cosine in near:
        if pk in rows_by_id:
            scores[pk] = max(scores.get(pk, 0.0), min(1.0, cosine))
            channels.setdefault(pk, []).append("vector")
    ranked = sorted(scores, key=lambda pk: (-scores[pk], -rows_by_id[pk].recorded_at.timestamp(), pk))[:limit]
    best = [rows_by_id[pk] for pk in ranked]
    firsts = _first_recorded(agent=agent, items=best)
    hits = [
        FactHit(
            fact_dict(r, created_at=firsts.get((r.namespace, r.attribute))),
            round(scores[r.pk], 4),
            tuple(channels[r.pk]),
        )
        for r in best
    ]
    return FactHits(hits, mode=used, errors=errors)


def _rough_match(*, agent: Agent, words: list[str]) -> Q:
    """The facts that may hold one of the words (step 2 checks which exactly): the key or the value
    holding it as a piece of text. With encryption on the value is sealed, so its blind index is
    asked for the word's keyed hash instead (a value written before encryption was on, not sealed
    yet, is still found by its text)."""
    rough = Q()
    for word in words:
        rough |= Q(attribute__icontains=word) | Q(value__icontains=word)
    if encryption_enabled():
        hashes = words_hashes(agent_id=agent.pk, words=words)
        if hashes:
            rough |= Q(keyword_hashes__overlap=hashes)
    return rough


@transaction.atomic
def facts_forget_all(*, agent: Agent, namespace: str, actor: str = "") -> int:
    """Delete every fact of a namespace and the namespaces inside it, history included (e.g. all about a person).

    Returns how many facts were there to forget (keys whose value held).
    """
    namespace = namespace_check(namespace)
    held = facts_current(agent=agent, namespace=namespace, nested=True).count()
    rows = _facts(agent=agent).filter(_in_namespace(namespace, nested=True))
    gone = sorted(rows.values_list("pk", flat=True))
    deleted, _ = MemoryItem.objects.filter(agent=agent, pk__in=gone).delete()
    if gone:  # a follower of the agent's events drops them too (ids only)
        event_record(agent_id=agent.pk, type="item.forgotten", ids=gone)
    audit_append(
        action="facts.forgotten",
        actor=actor,
        agent_id=agent.pk,
        # A namespace is the agent's own naming ("users/ana"): the chain keeps a digest of it only,
        # which still tells two forgets of the same namespace apart from others.
        subject="ns:" + hashlib.sha256(namespace.encode()).hexdigest()[:16],
        outcome="deleted",
        details={"facts": held, "rows": deleted},
    )
    return held


def facts_prune(
    *, now: datetime | None = None, batch: int = 1000, agent_id: int | None = None, keep: Q | None = None
) -> int:
    """Remove the facts whose time to live ran out (they are invisible from that moment already).

    `agent_id` limits it to one agent; `keep` is a filter of items to leave (legal holds)."""
    at = now or timezone.now()
    removed = 0
    expired = MemoryItem.objects.filter(expires_at__isnull=False, expires_at__lte=at)
    if agent_id is not None:
        expired = expired.filter(agent_id=agent_id)
    if keep is not None:
        expired = expired.exclude(keep)
    while True:
        with transaction.atomic():
            # Locked as read: the event names exactly the rows this transaction deletes.
            found = list(
                expired.select_for_update(skip_locked=True, of=("self",))
                .order_by("agent_id", "pk")
                .values_list("pk", "agent_id")[:batch]
            )
            if not found:
                return removed
            by_agent: dict[int, list[str]] = {}
            for pk, owner in found:
                by_agent.setdefault(owner, []).append(pk)
            _, by_model = MemoryItem.objects.filter(pk__in=[pk for pk, _ in found]).delete()
            for owner, gone in sorted(by_agent.items()):
                event_record(agent_id=owner, type="item.forgotten", ids=gone)
        removed += by_model.get(MemoryItem._meta.label, 0)
