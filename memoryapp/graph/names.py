"""A graph built by rules, without a model: who names whom (for evaluations and threads that were
never extracted).

`eval_retrieval` scores recall on conversations no model has read (no items, no edges), so the
graph channels would have nothing to walk. This builder gives them a graph from the turns alone:

1. A name is a capitalised word that does not open a sentence and is not a common word written
   capitalised ("I", "I'm", weekdays and months are kept out: they are times, not entities).
2. Each turn's speaker (its `sender_name`) is an entity; every name the turn holds is one too.
3. For each name a turn holds, an edge `speaker -[mentions]-> name`, and for each two names of the
   turn an edge `a -[named with]-> b`, each quoting the name as the turn writes it, so the turn is
   the edge's evidence and the cascades take the edge with the turn as they take any other.

It is what the documentation calls the rule-based graph: coarse (co-occurrence, not meaning) and
documented as such; extraction's model-written edges replace nothing of it and mix with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import combinations

from django.db import transaction

from governance.audit.chain import audit_append
from memoryapp.items.rules import Scope, normalized_name
from memoryapp.items.services import entity_for
from memoryapp.models import Entry, Relation, RelationEvidence, SubjectMention, Thread
from memoryapp.models.choices import EvidenceStatus, ItemStatus, Trust
from memoryapp.subjects.detect import mentions_record
from memoryapp.subjects.erasing import senders_erasing_refuse

RULES_VERSION = "names_v1"
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'\-]*|[.!?]+")
_NOT_NAMES = frozenset(
    [
        "i",
        "i'm",
        "i've",
        "i'll",
        "i'd",
        "ok",
        "okay",
        "oh",
        "hey",
        "hi",
        "hello",
        "yes",
        "no",
        "wow",
        "thanks",
        "thank",
        "the",
        "a",
        "an",
        "and",
        "but",
        "so",
        "my",
        "we",
        "you",
        "it",
        "that",
        "this",
        "what",
        "when",
        "where",
        "who",
        "why",
        "how",
        "mom",
        "dad",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ]
)
MAX_NAMES_PER_TURN = 6


def names_in(text: str) -> list[str]:
    """The names of a text by the rules above, in order, each once."""
    names: list[str] = []
    opening = True
    for token in _TOKEN.findall(text or ""):
        if token[0] in ".!?":
            opening = True
            continue
        word = token.strip("'-")
        if word.endswith("'s"):
            word = word[:-2]
        if (
            not opening
            and word[:1].isupper()
            and word.lower() not in _NOT_NAMES
            and len(word) > 1
            and word not in names
        ):
            names.append(word)
        opening = False
    return names[:MAX_NAMES_PER_TURN]


@transaction.atomic
def graph_from_names(*, thread: Thread, entries: Sequence[Entry] | None = None, actor: str = "") -> int:
    """Write the rule-based graph of a thread's messages (in the thread's person's scope); returns
    how many edges it wrote or found. Bulk writes: one entity lookup per name, edges and quotes in
    one statement each, one audit record.

    In the scope of a person being erased: 409 `person_being_erased`, field `user_id`, nothing
    written, as every graph write (`relation_write`)."""
    rows = list(entries) if entries is not None else list(thread.entries.filter(type="message").order_by("seq"))
    scope = Scope(user_id=thread.user_id)
    if scope.user_id:
        # Her erasure took her entities and edges at one step: those made after it would outlive
        # it (memoryapp.subjects.erasing, step 5). Her eraser lock held shared to the end, so an
        # erasure starting meanwhile waits and takes them.
        senders_erasing_refuse(agent_id=thread.agent_id, senders={scope.user_id: "user_id"}, what="memory")
    entities: dict[str, str] = {}

    def entity_id(name: str) -> str:
        key = normalized_name(name)
        if key not in entities:
            entities[key] = entity_for(agent=thread.agent, scope=scope, subject=name).pk
        return entities[key]

    wanted: dict[tuple[str, str, str], list[tuple[Entry, str]]] = {}
    for entry in rows:
        names = names_in(entry.text or "")
        speaker = (entry.sender_name or "").strip()
        for name in names:
            if speaker and normalized_name(speaker) != normalized_name(name):
                wanted.setdefault((entity_id(speaker), "mentions", entity_id(name)), []).append((entry, name))
        for a, b in combinations(names, 2):
            if normalized_name(a) != normalized_name(b):
                wanted.setdefault((entity_id(a), "named with", entity_id(b)), []).append((entry, a))
    existing = {
        (r.subject_id, r.predicate, r.object_id): r
        for r in Relation.objects.filter(
            agent=thread.agent, user_id=scope.user_id, project_id="", thread_id="", prompt_version=RULES_VERSION
        )
    }
    fresh = [
        Relation(
            agent=thread.agent,
            user_id=scope.user_id,
            subject_id=head,
            predicate=predicate,
            object_id=tail,
            trust=Trust.MODEL,
            status=ItemStatus.ACTIVE,
            confidence=0.3,
            verified=True,
            prompt_version=RULES_VERSION,
        )
        for (head, predicate, tail) in wanted
        if (head, predicate, tail) not in existing
    ]
    Relation.objects.bulk_create(fresh, ignore_conflicts=True)
    edges = {
        (r.subject_id, r.predicate, r.object_id): r
        for r in Relation.objects.filter(agent=thread.agent, user_id=scope.user_id, prompt_version=RULES_VERSION)
    }
    known = set(
        RelationEvidence.objects.filter(agent=thread.agent, relation__in=list(edges.values())).values_list(
            "relation_id", "entry_id"
        )
    )
    quotes = [
        RelationEvidence(
            agent=thread.agent, relation=edges[key], entry=entry, quote=quote, status=EvidenceStatus.VERIFIED
        )
        for key, said in wanted.items()
        if key in edges
        for entry, quote in said
        if (edges[key].pk, entry.pk) not in known
    ]
    RelationEvidence.objects.bulk_create(quotes)
    mentions_record(agent=thread.agent, rows=[(SubjectMention.Table.RELATION_EVIDENCE, q.pk, q) for q in quotes])
    audit_append(
        action="graph.names_built",
        actor=actor,
        agent_id=thread.agent_id,
        thread_id=thread.external_id,
        subject=thread.external_id,
        person=thread.user_id,
        outcome="written",
        details={"edges": len(wanted), "quotes": len(quotes), "rules": RULES_VERSION},
    )
    return len(wanted)
