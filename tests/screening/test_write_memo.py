"""What one write's screener keeps between its texts (memoryapp.screening.recognizers `Memo`: a
phone candidate's parse and validation, a pattern match's checksum or domain check) never changes
a decision: each text of a batch, screened by one screener with its memo, gives the spans, the
stored text and the decisions that a screener of its own gives it, whatever came before it in the
batch (the same number or address again, next to a letter where it is not one, in another region's
form, in other scripts' digits)."""

from __future__ import annotations

import random

import pytest
from phonenumbers import Leniency, PhoneNumberMatcher

from memoryapp.screening.people import PeopleMatcher
from memoryapp.screening.policy import DEFAULTS, HOLD, REDACT
from memoryapp.screening.recognizers import (
    CATEGORIES,
    PERSON,
    PHONE,
    PHONE_REGIONS,
    Memo,
    detector,
    findings,
    nothing_possible,
)
from memoryapp.screening.screen import Screener, SensitiveDataRefused


def _fullwidth(text: str) -> str:
    return "".join(c if c == " " else chr(ord(c) + 0xFEE0) for c in text)


PHONES = [
    "+39 312 345 6789",
    "+1 202 555 0143",
    "+12025550143",
    "(202) 555-0143",
    "202-555-0143",
    "202.555.0143",
    "1-800-555-0199",
    "+1 (415) 555-2671 ext. 12",
    "020 7946 0958",
    "+44 20 7946 0958",
    "+44 (0)20 7946 0958",
    "0044 20 7946 0958",
    "07700 900123",
    "+33 1 42 68 53 00",
    "+49 30 901820",
    "+91 98765 43210",
    "+61 2 9374 4000",
    "+81 3-3224-9999",
    "+351 912 345 678",
    "+43 1110",
    "555-0143",
    "+39 06 6982",
    _fullwidth("+44 20 7946 0958"),
    "+1 202 555 0143".translate({ord(d): 0x0660 + int(d) for d in "0123456789"}),  # Arabic-Indic digits
    "+1 202\u200b555 0143",
]
# Around a number: what the matcher reads next to it (a Latin letter or a currency sign rules a
# number out), and what a batch holds besides.
SURROUNDINGS = [
    "call {} tonight",
    "{}",
    "ref a{}b",
    "abc{}",
    "{}def",
    "paid ${}",
    "{}%",
    "on 12/05/2024 call {} at 10:30",
    "card 4111 1111 1111 1111 or {}",
    "({})",
    "tel:{}",
]
OTHERS = [
    "write to marta.rossi@example.org",
    "write to marta.rossi@example.invalidtld",
    "write to bob@exa\u200bmple.com",
    "IBAN GB82 WEST 1234 5698 7654 32",
    "IBAN GB82 WEST 1234 5698 7654 33",
    "SSN 078-05-1120",
    "NINO AB123456C",
    "codice RSSMRA85T10A562S",
    "from 192.168.1.20 and 2001:db8::1",
    "Person Number7 is cust-12, person7@example.net",
    "Could you plan a day in Rome for us, starting early?",
]

SCREENED = [c for c in CATEGORIES if c != PERSON]


def _texts(seed: int, n: int = 120) -> list[str]:
    """A batch of turns drawing on the same numbers and addresses again and again."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        if rng.random() < 0.7:
            texts.append(rng.choice(SURROUNDINGS).format(rng.choice(PHONES)))
        else:
            texts.append(rng.choice(OTHERS))
    return texts


def _people() -> PeopleMatcher:
    return PeopleMatcher(
        [(f"p-{n}", "email", f"person{n}@example.net") for n in range(20)]
        + [(f"p-{n}", "name", f"person number{n}") for n in range(20)]
        + [(f"p-{n}", "external_id", f"cust-{n}") for n in range(20)]
        + [("p-phone", "phone", "+12025550143"), ("p-uk", "phone", "+442079460958")]
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_batch_memo_finds_in_each_text_what_the_text_alone_gives(seed: int) -> None:
    memo = Memo()
    for text in _texts(seed):
        assert set(findings(text, SCREENED, memo)) == set(findings(text, SCREENED)), text


@pytest.mark.parametrize("phone", PHONES)
@pytest.mark.parametrize("order", ["number first", "letters first"])
def test_a_number_ruled_out_next_to_letters_is_still_found_where_it_stands_alone(phone: str, order: str) -> None:
    """The same candidate in two turns of one write: next to letters (not a number there) and alone
    (a number): each turn gets what phonenumbers' matcher gives it, in either order."""
    alone, glued = f"call {phone} tonight", f"ref a{phone}b"
    texts = [alone, glued] if order == "number first" else [glued, alone]
    memo = Memo()
    detect = detector(PHONE)
    for text in texts:
        expected = {
            (m.start, m.end) for region in PHONE_REGIONS for m in PhoneNumberMatcher(text, region, Leniency.VALID)
        }
        assert {(f.start, f.end) for f in findings(text, [PHONE], memo)} >= expected
        assert set(detect(text, memo.parsed)) == expected
        assert set(detect(text)) == expected


@pytest.mark.parametrize("action", [REDACT, HOLD, "default"])
@pytest.mark.parametrize("seed", [4, 5])
def test_one_screener_for_a_batch_decides_as_one_screener_a_text(action: str, seed: int) -> None:
    policy = dict(DEFAULTS) if action == "default" else dict.fromkeys(DEFAULTS, action)
    policy["secret"] = REDACT if action == "default" else policy["secret"]
    people = _people()
    batch = Screener(agent_id=1, policy=policy, people=people)
    for index, text in enumerate(_texts(seed)):
        field = f"entries[{index}].content"
        alone = Screener(agent_id=1, policy=policy, people=people)
        try:
            expected = alone.text(text, field=field)
        except SensitiveDataRefused as refused:
            with pytest.raises(SensitiveDataRefused) as raised:
                batch.text(text, field=field)
            assert (raised.value.category, raised.value.field) == (refused.category, refused.field)
            continue
        assert batch.text(text, field=field) == expected, text
        assert batch.take_held() == alone.take_held()
        assert set(alone.decisions) <= set(batch.decisions)


def test_the_phone_detector_answers_what_the_matcher_of_each_region_does() -> None:
    """Region by region, repeats included, whether or not the second region's matcher was run (it is
    not when the first parsed only numbers written with their country code), memo or none."""
    detect = detector(PHONE)
    memo = Memo()
    for surrounding in SURROUNDINGS:
        for phone in PHONES:
            text = surrounding.format(phone)
            expected = [
                (m.start, m.end) for region in PHONE_REGIONS for m in PhoneNumberMatcher(text, region, Leniency.VALID)
            ]
            assert detect(text) == expected, text
            assert detect(text, memo.parsed) == expected, text


@pytest.mark.parametrize("seed", [6, 7])
def test_the_ordinary_turns_shortcut_decides_as_the_full_screening(seed: int) -> None:
    """An ASCII turn that `nothing_possible` and the people gate let go (the screener returns it
    unread) is one that `findings` and the people's `spans` find nothing in."""
    people = _people()
    rng = random.Random(seed)
    words = ["plan", "a", "day", "in", "Rome", "password", "key:", "verylongwordhere", "cust-3", "Person", "Number3"]
    words += ["RSSMRAURTMLARSNL", "passwd", "ghp_", "PRIVATE", "KEY", "x@y", "a:b:c", "vegetarian,", "abcdefghijk1"]
    words += ["password=hunterhunter", "ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", "db_pass=secretvalue"]
    kinds: set[tuple[bool, bool]] = set()
    for _ in range(400):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        quiet = nothing_possible(text, SCREENED) and not people.may_hold_ascii(text, None)
        found = set(findings(text, SCREENED)) | set(people.spans(text))
        if quiet:
            assert not found, text
        kinds.add((quiet, bool(found)))
    assert {(True, False), (False, True)} <= kinds
    # Each of the shortcut's checks turns a text away that holds what it looks for.
    for text in ["plan password=hunterhunter day", "codice RSSMRAURTMLARSNL", "ask Person Number3", "id cust-3"]:
        assert not nothing_possible(text, SCREENED) or people.may_hold_ascii(text, None)
        assert set(findings(text, SCREENED)) | set(people.spans(text)), text


def test_the_ordinary_turns_shortcut_counts_digits_at_signs_and_colons() -> None:
    """The shortcut's first tests (on the text's bytes): a digit anywhere turns an ASCII text away
    only where an enabled category's check passes with it (cards' 12 digits, ids' 4, a phone's run,
    an IP address's digit-dot-digit), an `@` where e-mail addresses are looked for, two colons where
    IP addresses are; a text that is not ASCII is never let go by it (the screener reads it whole)."""
    plain = "plan a day in Rome for us"
    assert nothing_possible(plain, SCREENED)
    for at in (0, 5, len(plain)):
        for mark in [*"0123456789", "@"]:
            text = plain[:at] + mark + plain[at:]
            assert nothing_possible(text, ["secret", "payment_card"]), text
    for text, turned_away_by in [
        ("plan a day at 7:45", []),
        ("plan a day at 7:45 for $12", ["national_id"]),
        ("plan a day on 2026-12-05 at 07:45", ["payment_card", "iban", "national_id", "phone"]),
        ("plan a 4.5 day", ["ip_address"]),
        ("plan: a day: in Rome", ["ip_address"]),
        ("plan a day x@y", ["email"]),
        ("call 312 345 6789", ["phone", "iban", "national_id"]),
    ]:
        for category in SCREENED:
            assert nothing_possible(text, [category]) == (category not in turned_away_by), (text, category)
    assert not nothing_possible("plan a day in Rom\u00e9", SCREENED)
    assert not nothing_possible("plan a day in Rome \u0663", SCREENED)  # an Arabic-Indic digit


# A number written with its `+` and then an international prefix rather than a country code: the
# US's (`011`) or the UK's (`00`). phonenumbers reads the digits after the `+` again in the region
# when they begin with no country code, so the US finds the first and the UK the second.
PREFIXED = ["+011 44 20 7946 0958", "+0044 20 7946 0958", "+00 44 20 7946 0958", "+011 39 312 345 6789"]
# The UK's matcher meets `+011 44 20 7946 0958` alone (before ` - `) where the US's never does:
# the US's takes `202 555 0143` after the slash first (not a UK number) and goes on past the run.
PREFIXED_RUN = "call +011 44 20 7946 0958 - 1/202 555 0143"


@pytest.mark.parametrize("phone", PREFIXED)
def test_a_number_after_its_plus_and_an_international_prefix_is_read_in_each_region(phone: str) -> None:
    detect = detector(PHONE)
    text = f"call {phone} tonight"
    expected = [(m.start, m.end) for region in PHONE_REGIONS for m in PhoneNumberMatcher(text, region, Leniency.VALID)]
    assert expected, phone
    assert detect(text) == expected
    assert detect(text, Memo().parsed) == expected


def test_one_regions_answer_for_a_prefixed_number_is_not_anothers_in_the_next_turn() -> None:
    """The UK's `no` to `+011 44 ...`, worked out in one turn, kept in the write's memo, was read as
    the US's in the next turn: the number stored unredacted."""
    policy = dict.fromkeys(DEFAULTS, "allow") | {PHONE: REDACT}
    screener = Screener(agent_id=1, policy=policy)
    screener.text(PREFIXED_RUN, field="entries[0].content")
    assert screener.text("call +011 44 20 7946 0958 now", field="entries[1].content") == "call [phone] now"


def test_the_subject_index_reading_the_screeners_memo_finds_who_a_prefixed_number_names() -> None:
    """`rows_named` reads the stored text with the screener's memo: a registered person's number in
    the US's `+011` form, left in the text by screening, is found as it is without the memo."""
    people = _people()
    policy = dict.fromkeys(DEFAULTS, "allow") | {PHONE: REDACT, PERSON: REDACT}
    screener = Screener(agent_id=1, policy=policy, people=people)
    stored = [screener.text(PREFIXED_RUN, field="entries[0].content")]
    assert "p-uk" in people.people_in(stored)
    assert people.people_in(stored, screener.memo) == people.people_in(stored)
