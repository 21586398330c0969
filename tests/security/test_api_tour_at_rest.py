"""The whole agent API toured with encryption on: a pg_dump afterwards holds none of the words the
tour wrote into what is sealed (entries and imported ones, tool calls, items, facts and their
values, evidence, memory files, context documents, the working note, observations)."""

from __future__ import annotations

from typing import Any

from tests.kit.api import Caller
from tests.kit.api_tour import api_tour
from tests.kit.crypto import assert_none_planted, pg_dump
from tests.kit.servers import database_conninfo

# Written by the tour into sealed columns only. Left out: the words of the compaction summaries and
# of the turns they cover ("Lisbon", "weather and the trains": compaction events are not sealed yet),
# item subjects ("Marta": the slot stays plaintext) and paths (docs/security.md, Encryption at rest).
PLANTED = [
    "vegetarian",  # an entry, an item's value, its evidence quote
    "nurse",  # a fact's value, an observation, a brief card
    "Porto",  # an imported conversation
    "Saturday",  # a memory file's edit
    "passport",  # the working note
    "metric units",  # a context document
    "Answer briefly",  # a context document's versions
    "aisle",  # a fact written through the memory tools
    "shifts",  # an observation's statement
]


def test_a_dump_after_the_api_tour_holds_none_of_its_sealed_words(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    api_tour(alice)

    dump = pg_dump(database_conninfo())
    assert "enc:v1:dk" in dump
    assert_none_planted(dump, PLANTED)
