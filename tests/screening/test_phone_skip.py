"""The phone detector's skip (memoryapp.screening.recognizers `_phone_lead`): phonenumbers' matcher
begins each search at most ten characters before the next digit, and makes none when no digit is
left, rather than trying its pattern at every place of the prose around a number. It finds exactly
what the library's own matcher finds, region by region, in real conversations (LoCoMo) with phone
numbers planted in them at every distance from their ends, behind brackets, plus signs and
punctuation, and next to times, dates, prices and card numbers."""

from __future__ import annotations

import random

from phonenumbers import Leniency, PhoneNumberMatcher

from memoryapp.screening.recognizers import PHONE, PHONE_REGIONS, Memo, _phone_lead, detector
from tests.kit.locomo_threads import locomo_turns
from tests.screening.test_write_memo import PHONES

# What a number is planted with: its lead (up to two brackets or plus signs with punctuation after
# each, ten characters at most before the first digit), and what stands around it.
LEADS = ["", "(", "+", "[", "\uff08", "( ", "(-- ", "+(", "(.-/~[", "( - )( ", "(\u3000\u3000\u3000\u3000(----"]
AROUND = [
    "call {} tonight",
    "{}",
    "{} ",
    " {}",
    "tel:{}",
    "at 10:30 on 12/05/2024, {} or 4111 1111 1111 1111",
    "paid $12.50 ({}) for room 4.5",
    "ref a{}b",
    "x" * 30 + " {} " + "y" * 30,
    "{} and {}",
]


def _library(text: str) -> list[tuple[int, int]]:
    """The library's matcher region by region, as the detector answers (Presidio's PhoneRecognizer)."""
    return [(m.start, m.end) for region in PHONE_REGIONS for m in PhoneNumberMatcher(text, region, Leniency.VALID)]


def _planted(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        phones = [rng.choice(LEADS) + rng.choice(PHONES) for _ in range(2)]
        texts.append(rng.choice(AROUND).format(*phones))
    return texts


def _assert_as_the_library(texts: list[str]) -> int:
    """Each text's spans as the library's matcher finds them, with a write's memo and without;
    answers how many texts held a number."""
    detect, memo = detector(PHONE), Memo()
    held = 0
    for text in texts:
        expected = _library(text)
        held += bool(expected)
        assert detect(text) == expected, text
        assert detect(text, memo.parsed) == expected, text
    return held


def test_the_skip_is_live_with_the_installed_phonenumbers() -> None:
    assert _phone_lead() == 10


def test_planted_numbers_are_found_as_the_librarys_matcher_finds_them() -> None:
    assert _assert_as_the_library(_planted(11, 600)) > 300


def test_conversations_with_planted_numbers_are_read_as_the_librarys_matcher_reads_them() -> None:
    """Every turn of the LoCoMo split with a digit as it is (dates, times, ages, prices), and every
    third turn with a number planted at a place of its own (after the word the seed picks)."""
    rng = random.Random(5)
    texts: list[str] = []
    for n, turn in enumerate(locomo_turns()):
        text = turn["text"]
        if any(char.isdigit() for char in text):
            texts.append(text)
        if n % 3 == 0:
            words = text.split(" ")
            at = rng.randrange(len(words) + 1)
            phone = rng.choice(LEADS) + rng.choice(PHONES)
            texts.append(" ".join([*words[:at], phone, *words[at:]]))
    assert _assert_as_the_library(texts) > 500
