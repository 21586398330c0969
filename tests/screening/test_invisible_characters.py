"""A sensitive value with an invisible character typed into it (a zero-width space, a joiner, a soft
hyphen, a byte order mark, a bidirectional mark) is still the value to a reader and to anyone who
copies it: the screen finds it as it finds the plain one, and its redaction covers the whole of it."""

from __future__ import annotations

import pytest

from memoryapp.models import Entry
from memoryapp.screening.identifiers import identifiers_set
from memoryapp.screening.people import people_matcher
from memoryapp.screening.recognizers import CATEGORIES, PERSON, findings
from tests.kit.api import Caller
from tests.screening.test_screening import SAMPLES, append, screening_set

# Format characters (Unicode category Cf) a reader does not see, and the soft hyphen.
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e", "\u202c"]
# Where in each sample's value an invisible character goes (the value's own middle).
VALUES = {
    "email": "Ines.Valdo|miro@example.com",
    "phone": "+351 912 3|45 678",
    "payment_card": "4111 11|11 1111 1111",
    "iban": "GB82 WEST 12|34 5698 7654 32",
    "national_id": "536-22|-8173",
    "ip_address": "192.168|.14.27",
    "secret": "ghp_a1B2c3D4e5F6g7H8i|9J0k1L2m3N4o5P6q7R8",
}


def _split(category: str, char: str) -> tuple[str, str]:
    """(the sample as typed with `char` inside its value, the value as typed)."""
    plain = VALUES[category].replace("|", "")
    typed = VALUES[category].replace("|", char)
    assert plain in SAMPLES[category]
    return SAMPLES[category].replace(plain, typed), typed


@pytest.mark.parametrize("char", INVISIBLE)
@pytest.mark.parametrize("category", sorted(VALUES))
def test_a_value_with_an_invisible_character_inside_is_found_whole(category: str, char: str) -> None:
    text, typed = _split(category, char)
    found = [f for f in findings(text, [c for c in CATEGORIES if c != PERSON]) if f.category == category]
    assert found, f"{category} with {char!r} inside was not found"
    start = text.index(typed)
    # The span covers the typed value, invisible character included (what a redaction replaces).
    assert any(f.start <= start and f.end >= start + len(typed) for f in found), found


@pytest.mark.django_db
@pytest.mark.parametrize("category", sorted(VALUES))
def test_a_value_with_a_zero_width_space_is_redacted_at_write(alice: Caller, category: str) -> None:
    screening_set(alice, **{category: "redact"})
    text, typed = _split(category, "\u200b")
    append(alice, "t-zw", text)
    stored = Entry.objects.get(thread__external_id="t-zw").text
    assert f"[{category}]" in stored and typed not in stored and "\u200b" not in stored, stored


# Zero of each script's digits: full-width, Arabic-Indic, extended Arabic-Indic (Persian),
# Devanagari, mathematical bold.
DIGIT_ZEROS = [0xFF10, 0x0660, 0x06F0, 0x0966, 0x1D7CE]
# Values whose every digit a writer of another script types in that script's digits.
IN_DIGITS = {
    "payment_card": "my card is 4111 1111 1111 1111 thanks",
    "iban": "pay into GB82 WEST 1234 5698 7654 32 today",
    "national_id": "my SSN is 536-22-8173 for the form",
    "phone": "call me on +351 912 345 678 tonight",
    "ip_address": "the server is at 192.168.14.27 now",
}


def _in_script(text: str, zero: int) -> str:
    return "".join(chr(zero + int(c)) if c.isdigit() else c for c in text)


@pytest.mark.parametrize("zero", DIGIT_ZEROS)
@pytest.mark.parametrize("category", sorted(IN_DIGITS))
def test_a_number_in_the_digits_of_another_script_is_found(category: str, zero: int) -> None:
    text = _in_script(IN_DIGITS[category], zero)
    found = [f for f in findings(text, [c for c in CATEGORIES if c != PERSON]) if f.category == category]
    assert found, f"{category} in digits from {zero:#x} was not found"
    digits = [i for i, c in enumerate(text) if c.isdigit()]
    assert any(f.start <= digits[0] and f.end > digits[-1] for f in found), found


@pytest.mark.django_db
def test_a_card_in_full_width_digits_is_redacted_by_the_default_policy(alice: Caller) -> None:
    text = _in_script(IN_DIGITS["payment_card"], 0xFF10)
    append(alice, "t-fw", text)
    assert Entry.objects.get(thread__external_id="t-fw").text == "my card is [payment_card] thanks"


# Values typed in the full-width forms of ASCII (an East Asian keyboard's full-width mode): not only
# their digits, their `@`, `.`, `:` and letters too.
FULL_WIDTH = {
    "email": "write to ines.valdomiro@example.com today",
    "ip_address": "the server is at 192.168.14.27 now",
    "payment_card": "my card is 4111-1111-1111-1111 thanks",
}


@pytest.mark.parametrize("category", sorted(FULL_WIDTH))
def test_a_value_in_full_width_forms_is_found_whole(category: str) -> None:
    plain = FULL_WIDTH[category]
    value = plain.split()[-2]
    text = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in plain)
    found = [f for f in findings(text, [c for c in CATEGORIES if c != PERSON]) if f.category == category]
    start = plain.index(value)
    assert any(f.start <= start and f.end >= start + len(value) for f in found), (text, found)


def test_an_invisible_character_between_two_values_still_parts_them() -> None:
    """Taken out, a zero-width space between two values would join them into one word that neither
    pattern matches (`\\b`): the text as typed is searched too."""
    text = "AB123456C\u200b4111111111111111"
    found = {(f.category, f.start, f.end) for f in findings(text, [c for c in CATEGORIES if c != PERSON])}
    assert ("national_id", 0, 9) in found and ("payment_card", 10, 26) in found, found


@pytest.mark.django_db
def test_a_registered_persons_e_mail_and_phone_hidden_by_invisible_or_foreign_digits_are_still_hers(
    alice: Caller,
) -> None:
    identifiers_set(
        agent=alice.agent,
        user_id="u-ines",
        body={"emails": ["ines.valdomiro@example.com"], "phones": ["+351 912 345 678"]},
        actor="test",
    )
    # Only `person`: the e-mail and phone categories allow, so what is redacted is her identifiers.
    screening_set(alice, person="redact")
    full_width = "".join(chr(0xFF10 + int(c)) if c.isdigit() else c for c in "+351 912 345 678")
    typed = f"write to ines.valdo\u200bmiro@example.com or call {full_width} after six"
    append(alice, "t-person-hidden", typed)
    stored = Entry.objects.get(thread__external_id="t-person-hidden").text
    assert "valdo" not in stored and full_width not in stored and "\u200b" not in stored, stored
    assert stored.count("[person]") == 2, stored
    matcher = people_matcher(agent_id=alice.agent.pk)
    assert matcher is not None and matcher.people_in([typed]) == {"u-ines"}


# Characters whose compatibility form (NFKC) is one ASCII character, which a reader takes for it:
# the small forms (`﹫` U+FE6B, `﹒` U+FE52, `﹢` U+FE62), full-width letters, mathematical and circled
# letters, the ideographic space. Each value as typed, and its category.
COMPATIBLE = [
    ("email", "ines.valdomiro\ufe6bexample.com"),
    ("email", "ines.valdomiro\ufe6bexample\ufe52com"),
    ("email", "\U0001d422\U0001d427\U0001d41e\U0001d42c.valdomiro@example.com"),
    ("email", "\u24d8\u24dd\u24d4\u24e2.valdomiro\uff20example.com"),
    ("phone", "\ufe62351 912 345 678"),
    ("phone", "\uff0b\uff13\uff15\uff11\u3000\uff19\uff11\uff12\u3000\uff13\uff14\uff15\u3000\uff16\uff17\uff18"),
    ("ip_address", "192\ufe52168\u202414.27"),
]


@pytest.mark.parametrize(("category", "typed"), COMPATIBLE)
def test_a_value_in_compatibility_forms_is_found_whole(category: str, typed: str) -> None:
    text = f"note: {typed} for later"
    found = [f for f in findings(text, [c for c in CATEGORIES if c != PERSON]) if f.category == category]
    start = text.index(typed)
    assert any(f.start <= start and f.end >= start + len(typed) for f in found), (text, found)


def test_a_character_folding_to_several_is_left_as_it_is() -> None:
    """`ﬁ` (NFKC `fi`) is not folded: one character for one, or every span after it would move."""
    text = "the \ufb01le of card 4111 1111 1111 1111"
    found = [f for f in findings(text, [c for c in CATEGORIES if c != PERSON]) if f.category == "payment_card"]
    assert [text[f.start : f.end] for f in found] == ["4111 1111 1111 1111"]


@pytest.mark.django_db
def test_an_e_mail_with_a_small_commercial_at_is_redacted_at_write(alice: Caller) -> None:
    screening_set(alice, email="redact")
    append(alice, "t-small", "write to ines.valdomiro\ufe6bexample\ufe52com today")
    assert Entry.objects.get(thread__external_id="t-small").text == "write to [email] today"
