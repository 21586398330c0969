"""Her identifiers typed as a reader still reads them (full-width or small forms, digits of another
script, an invisible character inside) are hers to the erasure too (issue 25 §4).

The index at write reads a text as screening does (`text_readings`: compatibility forms as ASCII,
invisible characters left out) and found such rows; the erasure's matcher read them as stored, so
it redacted nothing in them (or only the part of an e-mail that spells her name) and they kept
her e-mail and phone."""

from __future__ import annotations

import pytest

from memoryapp.models import Entry
from memoryapp.screening.identifiers import identifiers_check, identifiers_set
from memoryapp.screening.people import people_matcher
from memoryapp.subjects.matching import PLACEHOLDER, PersonMatcher
from tests.kit.api import Caller, post_entry, post_ok, post_thread
from tests.kit.mentions import IDENTIFIERS, PERSON

pytestmark = pytest.mark.django_db

FULL_WIDTH_PHONE = "\uff0b\uff13\uff15\uff11 \uff19\uff11\uff12 \uff13\uff14\uff15 \uff16\uff17\uff18"
# Each as typed in a turn of another person's thread: her e-mail, phone and name in lookalike forms.
TYPED = [
    "ines.valdomiro\uff20example.org",  # full-width @
    "ines.valdomiro\ufe6bexample\ufe52org",  # small @ and full stop
    "\uff49\uff4e\uff45\uff53.valdomiro@example.org",  # full-width letters
    "ines.valdo\u200bmiro@exam\u200bple.org",  # zero-width spaces inside
    FULL_WIDTH_PHONE,
    "+351 912\u200b345 678",
    "In\u200b\u00eas Valdo\u00admiro",  # a zero-width space and a soft hyphen in her name
]


def _matcher() -> PersonMatcher:
    return PersonMatcher(user_id=PERSON, identifiers=identifiers_check(IDENTIFIERS))


@pytest.mark.parametrize("typed", TYPED)
def test_the_erasures_matcher_finds_and_redacts_each_whole(typed: str) -> None:
    text = f"please contact {typed} tomorrow"
    assert _matcher().holds(text)
    assert _matcher().redacted(text) == f"please contact {PLACEHOLDER} tomorrow"


def test_forget_redacts_her_identifiers_typed_in_lookalike_forms(alice: Caller) -> None:
    post_thread(alice, "t-carl", user_id="u-carl")
    ids = [
        post_entry(alice, "t-carl", role="user", content=f"please contact {typed} tomorrow")["id"] for typed in TYPED
    ]
    post_ok(alice.client, f"/api/v1/users/{PERSON}/forget", {"identifiers": IDENTIFIERS}, status=200)
    texts = list(Entry.objects.filter(pk__in=ids).order_by("pk").values_list("text", flat=True))
    assert texts == [f"please contact {PLACEHOLDER} tomorrow"] * len(TYPED), texts


# Her name with its accent as a combining mark after the letter (decomposed, NFD: as macOS files
# and some keyboards write it), in mixed case, and with accents she does not write.
NAMED = ["Ine\u0302s Valdomiro", "INE\u0302S VALDOMIRO", "ine\u0302s valdomi\u0301ro", "In\u00c9s VALD\u00d3MIRO"]


@pytest.mark.parametrize("named", NAMED)
def test_her_name_with_decomposed_or_other_accents_is_hers_to_screening_and_erasure(alice: Caller, named: str) -> None:
    """`\\w` is no combining mark: the word `Ine\\u0302s` was read as `Ine` and `s`, so neither
    screening's `person` category nor the erasure knew the name."""
    identifiers_set(agent=alice.agent, user_id=PERSON, body=IDENTIFIERS, actor="test")
    text = f"met {named} today"
    matcher = people_matcher(agent_id=alice.agent.pk)
    assert matcher is not None and matcher.people_in([text]) == {PERSON}
    assert _matcher().redacted(text) == f"met {PLACEHOLDER} today"
