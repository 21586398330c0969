"""The entity turn channel (004: turns found "by the entities of memory [the question] names").

1. The question's names: its capitalised words and runs of them ("Ana", "New York"), and its
   words (an entity may be named in lower case, "lisbon").
2. The entities they name: the memory's entities the scope sees (the agent's, its person's,
   its project's, its thread's) whose name is one of them (one lookup by normalised name), with
   their aliases; and, in a conversation of three senders or more, the people of the
   conversation: the senders of the scope's turns named by the question.
3. The turns of those entities: said by one of the people named, or holding an entity's name or
   an alias, or a person's name, in their words; ranked by cosine to the question (newest first
   without a vector). "What does Melanie paint?" then reads Melanie's turns and those that name
   her first, not the other speaker's talk of painting.

In a conversation of two, naming one of its two parties narrows little: the channel would only
repeat the vector channel's order among half the turns, and on LoCoMo (two speakers) it lowered
recall@10 (conv-30: 78.4 without, 74.7 with). There only entities of memory count.
"""

from __future__ import annotations

import re
import threading
import time
import unicodedata
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from governance.crypto.envelope import blind_keys
from governance.crypto.fields import equality_values, words_hashes
from governance.crypto.keyring import encryption_enabled
from memoryapp.models import Entity
from memoryapp.models.items import name_normalized
from memoryapp.precompiled import Precompiled
from memoryapp.search.channels import ENTRY, Channel, ChannelInput, register
from memoryapp.search.keyword import ChannelHit, entry_scope_size, sender_name_key
from memoryapp.search.query import KIND_AGGREGATE, KIND_PREFERENCE, STOP_WORDS
from memoryapp.search.vector import WALK_FROM_SCOPE, nearest_matching, read_exactly

MIN_SENDERS = 3
# Entities of the question's names read at most (before the scope's filter keeps 20 of them).
MAX_NAMED_READ = 500
# Words of any script ("Inês", "São Paulo"), as memoryapp.search.query reads them.
_NAME_WORD = re.compile(r"[^\W_][\w'\-]*")
_WORD = re.compile(r"[^\W_]+")
# The agent's entities of any of these normalised names (or their keyed hashes), compiled once per
# process (memoryapp.precompiled): every hybrid search that names a word reads it. The names go as one
# array parameter (`= ANY`), so that the statement is the same whatever their number.
_NAMED = Precompiled(
    lambda agent_id, keys: (
        Entity.objects.filter(agent_id=agent_id)
        .filter(RawSQL(f'"{Entity._meta.db_table}"."normalized_name" = ANY(%s)', (keys,), output_field=BooleanField()))
        .order_by("id")
        .only("id", "name", "aliases", "agent_id", "user_id", "project_id", "thread_id")[:MAX_NAMED_READ]
    ),
    -26,
    ["\x00entity"],
)
_SENDERS_TTL = 60.0
_senders_cache: dict[tuple[Any, ...], tuple[float, frozenset[str]]] = {}
_senders_lock = threading.Lock()


def capitalised_runs(text: str) -> list[str]:
    """The capitalised words of the text and the runs of them apart only by spaces ("Ana", "New
    York", "São Paulo"), in order: an upper-case first letter of any script."""
    text = unicodedata.normalize("NFC", text) if not text.isascii() else text
    runs: list[str] = []
    run: list[str] = []
    end = 0
    for match in _NAME_WORD.finditer(text):
        word = match.group()
        if not word[0].isupper():
            run = []
        elif run and text[end : match.start()].isspace():
            run.append(word)
            runs[-1] = " ".join(run)
        else:
            run = [word]
            runs.append(word)
        end = match.end()
    return runs


def question_names(ci: ChannelInput) -> list[str]:
    """Step 1: normalised candidate names, each once (runs of capitalised words first)."""
    found: list[str] = []
    for run in capitalised_runs(ci.analysis.text or ""):
        name = name_normalized(run.removesuffix("'s"))
        if name and name not in found:
            found.append(name)
    for word in [*ci.analysis.names, *ci.analysis.terms]:
        if word and word not in found:
            found.append(word)
    return found[:24]


def scope_senders(ci: ChannelInput) -> frozenset[str]:
    """The lower-cased senders of the scope's turns (cached a minute per scope); with encryption
    on, their `sender_name_key`s."""
    key = ("senders", *ci.scope.cache_key)
    now = time.monotonic()
    with _senders_lock:
        cached = _senders_cache.get(key)
        if cached and now - cached[0] < _SENDERS_TTL:
            return cached[1]
    where, params = ci.scope.where("e")
    # With encryption on the names are sealed: each sender is the text of its name's blind index
    # (`sender_name_key`), one query still, and never a value to open.
    sender, given = (
        ("e.sender_name_hashes::text", "e.sender_name_hashes IS NOT NULL")
        if encryption_enabled()
        else ("lower(e.sender_name)", "e.sender_name <> ''")
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT {sender} FROM memoryapp_entry e WHERE {where} AND {given} LIMIT 1000",
            params,
        )
        senders = frozenset(r[0] for r in cursor.fetchall() if r[0])
    with _senders_lock:
        if len(_senders_cache) > 10_000:
            _senders_cache.clear()
        _senders_cache[key] = (now, senders)
    return senders


def named_entities(ci: ChannelInput, names: list[str]) -> list[Entity]:
    """Step 2's entities of memory: those the thread's scope sees, named by one of `names`. The
    entities of those names are read first (one query; most questions name none), the scopes of the
    search's items only when one of them belongs to a person, project or thread."""
    keys = [k for name in names for k in equality_values(agent_id=ci.agent_id, text=name)]
    if not keys:
        return []
    found = _NAMED.rows(ci.agent_id, keys)
    if ci.items is not None and any(e.user_id or e.project_id or e.thread_id for e in found):
        # The scope the search's items have: the entities of those items' scopes (person, project,
        # thread), and those of none.
        scopes = list(ci.items.values_list("user_id", "project_id", "thread_id").distinct()[:50])
        found = [
            e
            for e in found
            if not (e.user_id or e.project_id or e.thread_id)
            or any(
                e.user_id in ("", user_id) and e.project_id in ("", project_id) and e.thread_id in ("", thread_id)
                for user_id, project_id, thread_id in scopes
            )
        ]
    return found[:20]


def _mention_words(entities: list[Entity], people: list[str]) -> list[str]:
    words: list[str] = []
    for text in [*people, *(e.name for e in entities), *(str(a) for e in entities for a in (e.aliases or []))]:
        for word in _WORD.findall(name_normalized(str(text))):
            if word not in STOP_WORDS and len(word) > 1 and word not in words:
                words.append(word)
    return words[:32]


def _sender_keys(ci: ChannelInput, names: Iterable[str]) -> tuple[str, dict[str, list[str]]]:
    """How a turn's sender is matched to names (as the keyword channel matches it): the column, and
    each name's values of it: the name itself (`lower(sender_name)`), or with encryption on its key
    under each blind key (`sender_name_hashes`; one key, but while a rotation walks the rows)."""
    if not encryption_enabled():
        return "lower(e.sender_name)", {n: [n] for n in names}
    blind = blind_keys(agent_id=ci.agent_id)
    return "e.sender_name_hashes::text", {n: [sender_name_key(n, key=key) for key in blind] for n in names}


def entity_turns(ci: ChannelInput) -> list[ChannelHit]:
    """The channel (see the module's doc)."""
    # When the speaker channel runs (on, and one speaker addressed: `speaker_runs`), her name is no
    # entity's here: her own turns come through that channel, and the turns saying her name are the
    # other speaker's talk to her ("Thanks, Melanie!"). Otherwise the names stay.
    addressed = ci.addressed if speaker_runs(ci) else frozenset()
    names = [n for n in question_names(ci) if n not in addressed]
    if not names:
        return []
    # The senders are read only when the question names someone (a capitalised name).
    senders = scope_senders(ci) if ci.analysis.names else frozenset()
    # In a conversation of two, one's turns are half the thread: naming a party narrows little, and
    # the channel would only repeat the vector channel's order (measured: it lowers recall). From
    # three senders on, the people named are entities of the conversation too.
    sender, keys = _sender_keys(ci, names)
    people = [n for n in names if any(k in senders for k in keys[n])] if len(senders) >= MIN_SENDERS else []
    entities = named_entities(ci, names)
    if not entities and not people:
        return []
    words = _mention_words(entities, people)
    where, params = ci.scope.where("e")
    params = {**params, "n": ci.depth, "people": [k for n in people for k in keys[n]]}
    conditions = [f"{sender} = ANY(%(people)s)"]
    if words:
        if encryption_enabled():
            hashes = words_hashes(agent_id=ci.agent_id, words=words)
            if hashes:
                conditions.append("e.keyword_hashes && %(m_hashes)s::bigint[]")
                params["m_hashes"] = hashes
        else:
            # Each name as a phrase ("new <-> york"), any of them.
            phrases = [" <-> ".join(_WORD.findall(n)) for n in [*people, *(name_normalized(e.name) for e in entities)]]
            phrases += [" <-> ".join(_WORD.findall(name_normalized(str(a)))) for e in entities for a in e.aliases or []]
            phrases = [p for p in phrases if p]
            if phrases:
                conditions.append("e.search_vector @@ to_tsquery('english', %(m_query)s)")
                params["m_query"] = " | ".join(f"({p})" for p in phrases)
    if ci.vector is not None:
        # As the time channel reads its turns: exactly, or by the HNSW walk in a large scope.
        return nearest_matching(
            scope=ci.scope,
            condition=" OR ".join(conditions),
            params=params,
            vector=ci.vector,
            limit=ci.depth,
            walk=entry_scope_size(ci.scope) >= WALK_FROM_SCOPE and not read_exactly(ci.scope, ci.depth),
            memo=ci.memo,
        )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.id, 0.0 FROM memoryapp_entry e WHERE {where} AND ({' OR '.join(conditions)})"
            " ORDER BY e.created_at DESC, e.seq DESC LIMIT %(n)s",
            params,
        )
        rows = cursor.fetchall()
    return [ChannelHit(id=r[0], score=float(r[1])) for r in rows]


register(
    Channel(
        name="entity",
        kind=ENTRY,
        run=entity_turns,
        weights={KIND_AGGREGATE: 1.0, KIND_PREFERENCE: 1.0},
        default_weight=0.8,
        uses_vector=True,
    )
)


# --- the speaker channel -------------------------------------------------------------------------
# In a conversation of two, a question naming one of them ("How many games has John won?", "Which
# cities has John been to?") asks about what that person said: her own turns. The vector channel
# ranks every turn, and half the thread is the other speaker's, so turns of hers that answer only in
# part (one of the several a count or a list needs) sink under the other's. This channel ranks her
# own turns alone by the question without her name (ChannelInput.turn_vector), so the fusion gives
# them a second list. The speaker is the one `addressed` speaker (memoryapp.search.speakers): the
# sender is matched as the keyword channel matches it (`sender_name`, or `sender_name_hashes` with
# encryption on). Weighed as the entity channel, which then leaves her name out (entity_turns).
# On unless SEARCH_SPEAKER_CHANNEL=false: on LoCoMo's dev file it lifts multi-hop and open-domain
# questions and lowers adversarial ones (which name the other speaker on purpose) and temporal ones
# a little (docs/recall-and-context.md).


def speaker_runs(ci: ChannelInput) -> bool:
    """Whether the speaker channel reads anything for this question in a hybrid search: it is on,
    the question addresses one speaker, and there is a vector of the question without her name."""
    return bool(settings.SEARCH_SPEAKER_CHANNEL) and len(ci.addressed) == 1 and ci.turn_vector is not None


def speaker_turns(ci: ChannelInput) -> list[ChannelHit]:
    """The addressed speaker's own turns, nearest the question without her name first."""
    if len(ci.addressed) != 1 or ci.turn_vector is None:
        return []
    sender, keys = _sender_keys(ci, ci.addressed)
    people = [k for values in keys.values() for k in values]
    return nearest_matching(
        scope=ci.scope,
        condition=f"{sender} = ANY(%(people)s)",
        params={"people": people},
        vector=ci.turn_vector,
        limit=ci.depth,
        walk=entry_scope_size(ci.scope) >= WALK_FROM_SCOPE,
        memo=ci.memo,
    )


register(
    Channel(
        name="speaker",
        kind=ENTRY,
        run=speaker_turns,
        weights={KIND_AGGREGATE: 1.0, KIND_PREFERENCE: 1.0},
        default_weight=0.8,
        needs_vector=True,
        setting="SEARCH_SPEAKER_CHANNEL",
        applies=lambda ci: len(ci.addressed) == 1,
    )
)
