"""The people an agent's memory is about, and their identifiers (issue 25 §1).

A person is the `user_id` the agent already files threads and items under; the agent registers
what identifies them (`PUT /api/v1/users/{user_id}/identifiers`): e-mail addresses, phone numbers,
names and the ids other systems know them by. Each is normalised (an e-mail lower-cased, a phone
in E.164 through `phonenumbers`, a name case- and accent-folded, an external id trimmed), sealed
under the person's data key and found again only through its blind index (`PersonIdentifier.lookup`).
Screening's `person` category looks for them in what the agent writes (memoryapp.screening.people); the
person's erasure deletes them (`identifiers_delete`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import phonenumbers
from django.db import connection, transaction
from django.db.models import F

from governance import locks
from governance.audit.chain import audit_append
from memoryapp.errors import DomainError
from memoryapp.models import Agent, IdentifierKind, PersonIdentifier
from memoryapp.models.people import identifier_key
from memoryapp.screening.recognizers import EMAIL, PHONE, Memo, detected, phone_possible

# The request's lists, in the order the answer gives them, and the kind each holds.
LISTS = {"emails": IdentifierKind.EMAIL, "phones": IdentifierKind.PHONE, "names": IdentifierKind.NAME}
LISTS["external_ids"] = IdentifierKind.EXTERNAL_ID
MAX_PER_KIND = 50
MAX_IDENTIFIER_CHARS = 254
# The longest name registered, in words: screening looks at runs of up to this many words.
MAX_NAME_WORDS = 4

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_WORD = re.compile(r"\w+", re.UNICODE)
# A word as it stands in a text: its combining marks with it (`Ine\u0302s`, a name typed or copied
# decomposed, NFD, as macOS files names): `\w` is no mark, so `_WORD` cut it in two (`Ine`, `s`),
# and the name it folds to (`name_folded`: marks off) was never the registered one.
_WORD_MARKED = re.compile(r"\w[\w\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]*")
# An external id as it stands in a text: a run without spaces or quotes, its trailing punctuation off.
_TOKEN = re.compile(r"[^\s\"'`<>()\[\]{},;]+")
_TRAILING = ".:!?"


def name_folded(name: str) -> str:
    """A name as it is matched: accents off, case folded, words only, single spaces."""
    if name.isascii() and name.isalnum():
        return name.lower()  # one word without accents (most words of a text): the same, faster
    decomposed = unicodedata.normalize("NFKD", name)
    plain = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(_WORD.findall(plain.casefold()))


def email_normalized(email: str) -> str:
    return email.strip().lower()


def phone_e164(phone: str, *, region: str | None = None) -> str | None:
    """The number in E.164 (`+351912345678`), None when it is not a valid phone number."""
    try:
        parsed = phonenumbers.parse(phone, region)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(parsed):
        return None
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def _normalized(kind: str, value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise DomainError("invalid_type", f"{field} must be a string.", field=field)
    if not value.strip() or len(value) > MAX_IDENTIFIER_CHARS or any(ord(c) < 32 for c in value):
        raise DomainError(
            "invalid_value",
            f"{field} must be a non-empty line of at most {MAX_IDENTIFIER_CHARS} characters.",
            field=field,
        )
    if kind == IdentifierKind.EMAIL:
        email = email_normalized(value)
        if not _EMAIL.match(email):
            raise DomainError("invalid_value", f"{field} is not an e-mail address.", field=field)
        return email
    if kind == IdentifierKind.PHONE:
        e164 = phone_e164(value)
        if e164 is None:
            raise DomainError(
                "invalid_value", f"{field} is not a valid phone number with its country code (+351 ...).", field=field
            )
        return e164
    if kind == IdentifierKind.NAME:
        folded = name_folded(value)
        if not folded:
            raise DomainError("invalid_value", f"{field} holds no letters.", field=field)
        if len(folded.split()) > MAX_NAME_WORDS:
            raise DomainError("invalid_value", f"{field} is longer than {MAX_NAME_WORDS} words.", field=field)
        if len(folded) > MAX_IDENTIFIER_CHARS:
            # Folding may lengthen a name (`ß` is `ss`, `㍿` four letters): its lookup is stored
            # as it is with encryption off, in a column of 300 characters with its kind.
            raise DomainError(
                "invalid_value", f"{field} is longer than {MAX_IDENTIFIER_CHARS} characters once folded.", field=field
            )
        return folded
    return value.strip()


def identifiers_check(body: Any) -> dict[str, list[str]]:
    """The four lists of a PUT, each value normalised and each list without repeats; a 400 naming
    the field (`phones[1]`) on a bad one."""
    if not isinstance(body, dict):
        raise DomainError("invalid_type", "The body must be an object.", field="body")
    for name in body:
        if name not in LISTS:
            raise DomainError("unknown_field", f"{name} is not one of {', '.join(LISTS)}.", field=str(name))
    checked: dict[str, list[str]] = {}
    for name, kind in LISTS.items():
        values = body.get(name, [])
        if values is None:
            values = []
        if not isinstance(values, list):
            raise DomainError("invalid_type", f"{name} must be a list of strings.", field=name)
        if len(values) > MAX_PER_KIND:
            raise DomainError("too_many", f"{name} holds at most {MAX_PER_KIND} values.", field=name)
        normalized = [_normalized(kind, value, f"{name}[{i}]") for i, value in enumerate(values)]
        checked[name] = list(dict.fromkeys(normalized))
    return checked


def identifiers_given(body: Any, *, field: str) -> dict[str, list[str]]:
    """Identifiers given with a request (an erasure's), checked as a PUT's are; a 400 names the
    field inside the request (`identifiers.phones[1]`). None or absent: none given."""
    if body is None:
        return {name: [] for name in LISTS}
    try:
        return identifiers_check(body)
    except DomainError as exc:
        inner = exc.field or ""
        exc.field = field if inner == "body" else f"{field}.{inner}"
        exc.message = exc.message.replace("The body", field, 1)
        raise


def identifiers_classified(values: Iterable[str]) -> dict[str, list[str]]:
    """Free-text identifiers (a staff request's "other identifiers") sorted into the registry's
    kinds: an e-mail address, a phone number with its country code, else a name (of at most
    MAX_NAME_WORDS words) and, without spaces, an external id too. A value fitting none is left out."""
    found: dict[str, list[str]] = {name: [] for name in LISTS}
    for value in values:
        text = value.strip()
        if not text:
            continue
        if _EMAIL.match(email_normalized(text)):
            found["emails"].append(email_normalized(text))
            continue
        e164 = phone_e164(text) if sum(c.isdigit() for c in text) >= 7 else None
        if e164 is not None:
            found["phones"].append(e164)
            continue
        folded = name_folded(text)
        if folded and len(folded.split()) <= MAX_NAME_WORDS and len(folded) <= MAX_IDENTIFIER_CHARS:
            found["names"].append(folded)
        if not any(c.isspace() for c in text):
            found["external_ids"].append(text)
    return {name: list(dict.fromkeys(values)) for name, values in found.items()}


def identifiers_of(*, agent: Agent, user_id: str, with_given: bool = False) -> dict[str, list[str]]:
    """The person's identifiers as registered (normalised), by list, each in the order registered;
    `with_given`: with those kept for her erasure's span (`PersonIdentifier.given`) too."""
    return identifiers_by_agent(user_id=user_id, agent_ids=[agent.pk], with_given=with_given).get(
        agent.pk, {name: [] for name in LISTS}
    )


def identifiers_by_agent(
    *, user_id: str, agent_ids: Sequence[int], with_given: bool = False
) -> dict[int, dict[str, list[str]]]:
    """`identifiers_of` for several agents in one query (a staff page lists every agent's):
    {agent id: lists}, the agents that registered nothing left out."""
    found: dict[int, dict[str, list[str]]] = {}
    names = {str(kind): name for name, kind in LISTS.items()}
    rows = PersonIdentifier.objects.filter(agent_id__in=list(agent_ids), user_id=user_id)
    if not with_given:
        rows = rows.filter(given=False)
    for agent_id, kind, value in rows.order_by("id").values_list("agent_id", "kind", "value"):
        found.setdefault(agent_id, {name: [] for name in LISTS})[names[kind]].append(value)
    return found


@transaction.atomic
def identifiers_set(*, agent: Agent, user_id: str, body: Any, actor: str) -> dict[str, list[str]]:
    """Replace the person's identifiers by these (an empty body removes them all); audited with the
    counts by kind, never the values."""
    checked = identifiers_check(body)
    # After her erasure's mark's lock (memoryapp.subjects.erasing): the identifiers given with an
    # erasure being marked are committed and read here (the mark itself is a row of its own).
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", [locks.ERASING, locks.person(agent.pk, user_id)])
    # Those given only with her erasure stay for its span (memoryapp.subjects.erasing), unless
    # registered now.
    names = {str(kind): name for name, kind in LISTS.items()}
    given = [
        (names[kind], value)
        for kind, value in PersonIdentifier.objects.filter(agent=agent, user_id=user_id, given=True)
        .order_by("id")
        .values_list("kind", "value")
        if value not in checked[names[kind]]
    ]
    PersonIdentifier.objects.filter(agent=agent, user_id=user_id).delete()
    listed = [(name, value, False) for name, values in checked.items() for value in values]
    rows = [
        PersonIdentifier(
            agent=agent,
            user_id=user_id,
            kind=LISTS[name],
            value=value,
            lookup=identifier_key(LISTS[name], value),
            given=is_given,
        )
        for name, value, is_given in [*listed, *((name, value, True) for name, value in given)]
    ]
    for row in rows:
        # One by one: pre_save seals the value and hashes the lookup under the person's keys.
        row.save(force_insert=True)
    agent.people_version = _registry_changed(agent_ids=[agent.pk]).get(agent.pk, agent.people_version)
    audit_append(
        action="person.identifiers_set",
        actor=actor,
        agent_id=agent.pk,
        subject=user_id,
        outcome="set",
        details={"counts": {name: len(values) for name, values in checked.items()}},
        person=user_id,
    )
    return checked


def identifier_collision_drop(keep_id: int, merged_id: int) -> None:
    """Drop a person's identifier that a rotation with new keys found registered twice (two
    registrations in its settle hashed it under two blind keys; governance.crypto.rotation
    .collisions_merge_with): the same person, kind and value, so the other one says it all."""
    PersonIdentifier.objects.filter(pk=merged_id).delete()


def identifiers_given_keep(*, agent_id: int, user_id: str, given: Mapping[str, Sequence[str]] | None) -> int:
    """Keep the identifiers given with the person's erasure that she has no row for (sealed under
    her key as registered ones are, `given`), for the erasure's span: writers find her by them,
    and a resume of the erasure interrupted uses them (memoryapp.subjects.erasing). Answers how
    many rows it added; the caller marks them with the rest."""
    wanted = [(name, value) for name in LISTS for value in (given or {}).get(name) or []]
    if not wanted:
        return 0
    held = identifiers_of(agent=Agent(pk=agent_id), user_id=user_id, with_given=True)
    added = 0
    for name, value in dict.fromkeys(wanted):
        if value in held[name]:
            continue
        kind = LISTS[name]
        # One by one: pre_save seals the value and hashes the lookup under the person's keys.
        PersonIdentifier(
            agent_id=agent_id, user_id=user_id, kind=kind, value=value, lookup=identifier_key(kind, value), given=True
        ).save(force_insert=True)
        added += 1
    if added:
        _registry_changed(agent_ids=[agent_id])
    return added


def identifiers_delete(*, agent_ids: Sequence[int] | None, user_id: str) -> int:
    """Delete the person's identifiers (of these agents; None: of every agent), those kept for her
    erasure's span (`given`) too. The erasure calls it. Answers how many of hers were registered:
    the erasure's own `given` rows are no identifiers of hers it erased."""
    rows = PersonIdentifier.objects.filter(user_id=user_id)
    if agent_ids is not None:
        rows = rows.filter(agent_id__in=list(agent_ids))
    touched: set[int] = set()
    registered = 0
    for agent_id, given in rows.values_list("agent_id", "given"):
        touched.add(agent_id)
        registered += not given
    rows.delete()
    if touched:
        _registry_changed(agent_ids=sorted(touched))
    return registered


def _registry_changed(*, agent_ids: Sequence[int]) -> dict[int, int]:
    """The identifiers of these agents' people changed: bump their registry version, so the
    write-time mention detector (memoryapp.subjects.detect) of every process builds their matcher
    again at its next write. Answers each agent's new version."""
    agents = Agent.objects.filter(pk__in=list(agent_ids))
    agents.update(people_version=F("people_version") + 1)
    return dict(agents.values_list("pk", "people_version"))


# --- finding them in texts --------------------------------------------------------------------------


# The kinds' prefixes of `identifier_key`, as plain strings: formatting an enum member per word of
# every text cost more than the rest of the loop.
_EMAIL_KEY = identifier_key(str(IdentifierKind.EMAIL.value), "")
_PHONE_KEY = identifier_key(str(IdentifierKind.PHONE.value), "")
_NAME_KEY = identifier_key(str(IdentifierKind.NAME.value), "")
_EXTERNAL_KEY = identifier_key(str(IdentifierKind.EXTERNAL_ID.value), "")


def _candidates(text: str, memo: Memo | None = None) -> dict[str, list[tuple[int, int]]]:
    """Every `kind:value` key the text could hold a registered identifier under, with its spans."""
    found: dict[str, list[tuple[int, int]]] = {}

    if "@" in text:
        for start, end in detected(EMAIL, text, memo):
            found.setdefault(_EMAIL_KEY + email_normalized(text[start:end]), []).append((start, end))
    if phone_possible(text):
        for start, end in detected(PHONE, text, memo):
            e164 = phone_e164(text[start:end], region="US") or phone_e164(text[start:end])
            if e164:
                found.setdefault(_PHONE_KEY + e164, []).append((start, end))
    words = [(m.start(), m.end(), name_folded(m.group())) for m in _WORD_MARKED.finditer(text)]
    for i in range(len(words)):
        name = _NAME_KEY
        first = words[i][0]
        for j in range(i, min(i + MAX_NAME_WORDS, len(words))):
            word = words[j][2]
            if word:
                name = f"{name}{word}" if name == _NAME_KEY else f"{name} {word}"
                found.setdefault(name, []).append((first, words[j][1]))
    for m in _TOKEN.finditer(text):
        token = m.group().rstrip(_TRAILING)
        if token:
            found.setdefault(_EXTERNAL_KEY + token, []).append((m.start(), m.start() + len(token)))
    return found


def identifier_candidates(text: str, memo: Memo | None = None) -> dict[str, list[tuple[int, int]]]:
    """Every `kind:value` key (`identifier_key`) a text could hold an identifier under, with its
    spans: what screening and the subject index compare with the registered people's keys
    (memoryapp.screening.people, memoryapp.subjects). `memo`: a write's detector results."""
    return _candidates(text, memo)
