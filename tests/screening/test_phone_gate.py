"""The gate before phonenumbers' matcher (memoryapp.screening.recognizers.phone_possible): a text
reaches the matcher only when it holds a phone-shaped run of digits, and no phone the matcher finds
is lost to the gate: phones written with spaces, dots, dashes, brackets, a `+` and a country code,
in other scripts' digits, and next to dates, times, prices and card numbers."""

from __future__ import annotations

import phonenumbers
import pytest
from phonenumbers import Leniency, PhoneNumberFormat, PhoneNumberMatcher
from phonenumbers.phonenumberutil import SUPPORTED_REGIONS

from memoryapp.screening.recognizers import (
    PHONE,
    PHONE_REGIONS,
    _country_code_written,
    _digits_only,
    findings,
    phone_possible,
)


def _matcher_spans(text: str) -> set[tuple[int, int]]:
    """What phonenumbers' matcher finds over the text, region by region, as Presidio runs it."""
    return {(m.start, m.end) for region in PHONE_REGIONS for m in PhoneNumberMatcher(text, region, Leniency.VALID)}


def _fullwidth(text: str) -> str:
    """The text in fullwidth forms (`+44` as U+FF0B U+FF14 U+FF14), spaces kept: digits of another
    block, which phonenumbers reads as digits."""
    return "".join(c if c == " " else chr(ord(c) + 0xFEE0) for c in text)


PHONES = [
    ("call +351 912 345 678 tonight", "+351 912 345 678"),
    ("office (415) 555-2671, ask for Ana", "(415) 555-2671"),
    ("dial 415.555.2671 before noon", "415.555.2671"),
    ("dial 415-555-2671", "415-555-2671"),
    ("landline 020 7946 0958.", "020 7946 0958"),
    ("abroad +44 (0)20 7946 0958", "+44 (0)20 7946 0958"),
    ("abroad 0044 20 7946 0958", "0044 20 7946 0958"),
    ("compact +442079460958, no spaces", "+442079460958"),
    ("short +43 1110 (six digits: the fewest a valid number has)", "+43 1110"),
    ("with extension +1 202 555 0143 ext. 12", "+1 202 555 0143 ext. 12"),
    (f"fullwidth {_fullwidth('+44 20 7946 0958')} too", _fullwidth("+44 20 7946 0958")),
    ("on 2024-05-12 call +1 202 555 0143 at 10:30", "+1 202 555 0143"),
    ("card 4111 1111 1111 1111 and phone 020 7946 0958", "020 7946 0958"),
    ("paid $12.50 on 12/05/2024, tel. (202) 555-0143", "(202) 555-0143"),
    ("US$ 202 555 0143", "202 555 0143"),
]


@pytest.mark.parametrize(("text", "phone"), PHONES)
def test_a_phone_in_any_common_shape_passes_the_gate_and_is_found(text: str, phone: str) -> None:
    assert phone_possible(text)
    found = {(f.start, f.end) for f in findings(text, [PHONE])}
    assert found == _matcher_spans(text)
    start = text.index(phone)
    assert (start, start + len(phone)) in found


@pytest.mark.parametrize(
    "text",
    [
        "Could you plan a day in Rome for us, starting early?",
        "at 10:30 on 12/05, room 4.5, 3 people for $12.50",
        "version 1.2.3, rooms 12 and 345, code 12345",
        "a date 2024/05/12 alone",  # slashes are phone punctuation: a run, which the matcher reads
    ],
)
def test_texts_without_a_phone_shaped_run_skip_the_matcher(text: str) -> None:
    assert _matcher_spans(text) == set()
    if "2024/05/12" not in text:
        assert not phone_possible(text)
    assert findings(text, [PHONE]) == []


def test_no_valid_number_of_any_region_is_lost_to_the_gate() -> None:
    # Every region's example numbers of every type, written in each format the library writes, in
    # a sentence: whatever the matcher finds there, the gate lets through. (Not a sample fitted to
    # the gate: the library's own examples, the shortest numbers among them.)
    checked = found = 0
    for region in sorted(SUPPORTED_REGIONS):
        for kind in (
            phonenumbers.PhoneNumberType.FIXED_LINE,
            phonenumbers.PhoneNumberType.MOBILE,
            phonenumbers.PhoneNumberType.TOLL_FREE,
            phonenumbers.PhoneNumberType.VOIP,
            phonenumbers.PhoneNumberType.UAN,
        ):
            number = phonenumbers.example_number_for_type(region, kind)
            if number is None:
                continue
            for fmt in (PhoneNumberFormat.INTERNATIONAL, PhoneNumberFormat.E164, PhoneNumberFormat.NATIONAL):
                written = phonenumbers.format_number(number, fmt)
                for text in (f"call {written} now", f"({written})", written.replace(" ", ".")):
                    checked += 1
                    if _matcher_spans(text):
                        found += 1
                        assert phone_possible(text), text
    assert checked > 1000 and found > 500


DIGIT_TEXTS = [
    "+39 312 345 6789",
    "(415) 555-2671 ext. 12",
    "+1-800-FLOWERS",
    "",
    "no digits at all",
    _fullwidth("+44 20 7946 0958"),
    "+\u0664\u0664 \u0662\u0660 7946 0958",  # Arabic-Indic digits
    "+44 \u00b2\u00b3 7946",  # superscripts: a digit value, not category Nd
    "\u0967\u0968\u0969 \u096a\u096b\u096c",  # Devanagari
]


@pytest.mark.parametrize("text", DIGIT_TEXTS)
def test_the_digits_of_a_candidate_are_read_as_phonenumbers_reads_them(text: str) -> None:
    """`_digits_only` (a substitution for an ASCII text) answers what phonenumbers'
    `normalize_digits_only` does, ASCII or not."""
    assert _digits_only(text) == phonenumbers.normalize_digits_only(text)


def _country_code_written_as_before(candidate: str) -> bool:
    """The check as it read before its ASCII shortcut: the library's digits, any letter ruling out."""
    from phonenumbers.phonenumberutil import COUNTRY_CODE_TO_REGION_CODE

    if any(char.isalpha() for char in candidate):
        return False
    digits = phonenumbers.normalize_digits_only(candidate)
    return digits[:1] not in ("", "0") and any(
        int(digits[:n]) in COUNTRY_CODE_TO_REGION_CODE for n in (1, 2, 3) if len(digits) >= n
    )


@pytest.mark.parametrize(
    "candidate",
    [
        *DIGIT_TEXTS,
        "+011 44 20 7946 0958",
        "+0044 20 7946 0958",
        "+999 123 4567",  # no country code 999
        "+1 202 555 0143 x12",
        "+\u00e9 33 1 23 45 67 89",  # a letter beyond ASCII
        "+33 1 23 45 67 89",
    ],
)
def test_whether_a_country_code_is_written_is_read_as_before(candidate: str) -> None:
    assert _country_code_written(candidate) == _country_code_written_as_before(candidate)
