"""The ordinary turns of a batch told apart at once (memoryapp.screening.batch): a text the batch's
tests let go is one the per-text shortcut (`nothing_possible`, the people gate) lets go too, so one
`findings` and the people's `spans` find nothing in; whatever its neighbours in the batch, the
separator between them, its script or its type. And the write path: a batch's turns holding
something are still redacted among ordinary ones."""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryapp.models import Entry
from memoryapp.screening import recognizers
from memoryapp.screening.batch import JoinedTexts
from memoryapp.screening.people import PeopleMatcher
from memoryapp.screening.policy import ALLOW, DEFAULTS, REDACT
from memoryapp.screening.recognizers import (
    CATEGORIES,
    NATIONAL_ID,
    PERSON,
    SECRET,
    findings,
    nothing_possible,
    nothing_possible_many,
)
from memoryapp.screening.screen import Screener
from memoryapp.threads.screened import entries_screened

SCREENED = [c for c in CATEGORIES if c != PERSON]
# The categories the default policy screens (secrets refused, cards redacted), as `Screener` lists them.
DEFAULT = [c for c in SCREENED if DEFAULTS[c] != ALLOW]

WORDS = [
    *["plan", "a", "day", "in", "Rome", "for", "us"],
    "vegetarian,",
    "(afternoon)",
    "abcde:fghij",
    "abc,defghijkl",
    "informations",
    "responsibilities",
    "(responsibility),",
    "multi-purpose-tool",
    "...ellipsis-here...",
    "\x1c",
    "RSSMRAURTMLARSNL",
    "password",
    "db_pass=secretvalue",
    "key:",
    "a:b",
    "Bearer",
    "PRIVATE",
    "KEY",
    "PuTTY",
    "x@y",
    "cust-3",
    "Person",
    "Number3",
    "number31",
    "+-+",
    "12",
    "3123456789",
    *["[12.5]", "07:45", "10:30:15", "$12.99", "4.5", "2026-12-05", "05/12/2026", "#3", "1,250"],
    *["312 345 6789", "+39", "4111", "1111-1111", "DE89", "536-22-8173", "10.0.0.1", "::1", "a1b2c3d4e5f6"],
    *["\uff14\uff11\uff11\uff11", "\u00b2", "O0l1", "2001:db8::1"],
    "Rom\u00e9",
    "\u0663",
    "\u0130stanbul",
    "jane@exa\u200bmple.com",
    "\t",
    "\n",
    "",
]


def _people() -> PeopleMatcher:
    return PeopleMatcher(
        [(f"p-{n}", "email", f"person{n}@example.net") for n in range(5)]
        + [(f"p-{n}", "name", f"person number{n}") for n in range(5)]
        + [("p-1", "external_id", "cust-3"), ("p-2", "phone", "+393123456789"), ("p-3", "name", "+-+")]
    )


def _batch(rng: random.Random) -> list[Any]:
    texts: list[Any] = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(0, 12))
    ]
    for odd in (None, {"note": "Person Number3"}, ["x@y"]):
        if rng.random() < 0.2:
            texts.insert(rng.randint(0, len(texts)), odd)
    return texts


@pytest.mark.parametrize(
    "categories", [SCREENED, DEFAULT, [SECRET], [NATIONAL_ID], [], ["email", "phone"], ["ip_address"]]
)
def test_a_text_the_batch_lets_go_is_one_the_shortcut_lets_go(categories: list[str]) -> None:
    rng = random.Random(11)
    kinds: set[tuple[bool, bool]] = set()
    for _ in range(600):
        texts = _batch(rng)
        for text, let_go in zip(texts, nothing_possible_many(JoinedTexts(texts), categories), strict=True):
            alone = isinstance(text, str) and nothing_possible(text, categories)
            assert alone or not let_go, text
            if let_go:
                assert not findings(text, categories), text
            kinds.add((alone, let_go))
    # Both answers are given, and the batch lets go most of what the shortcut lets go.
    assert {(True, True), (False, False)} <= kinds


def test_a_text_the_batch_lets_past_the_people_gate_names_no_one() -> None:
    people = _people()
    rng = random.Random(12)
    for _ in range(600):
        texts = _batch(rng)
        for text, let_go in zip(texts, people.lets_go(JoinedTexts(texts)), strict=True):
            if let_go:
                assert isinstance(text, str) and not people.may_hold_ascii(text, None), text
                assert not people.spans(text), text
        rows = [texts[at : at + 3] for at in range(0, len(texts), 3)]
        for row, maybe in zip(rows, people.rows_may_name(rows), strict=True):
            assert maybe or not people.people_in(row), row


def test_each_of_the_batch_tests_turns_its_text_away() -> None:
    """A word one check looks for, among ordinary turns, keeps its own turn from being let go and
    no other."""
    people = _people()
    plain = "plan a day in Rome for us"
    for odd in [
        "a 7.5 here",
        "call 312 345 6789",
        "x@y",
        "a:b:c",
        "my password is",
        "Bearer abc",
        "ab:cdefghijkl1",
        "RSSMRAURTMLARSNL",
    ]:
        texts = [plain, odd, plain]
        assert nothing_possible_many(JoinedTexts(texts), SCREENED) == [True, False, True], odd
    assert nothing_possible_many(JoinedTexts([plain, "vegetarian, please"]), SCREENED) == [True, True]
    # Digits alone turn a text away only where an enabled category's check needs no more of them.
    dated = ["[12.5] at 07:45 for $9", "a 7 here", "card 4111 1111 1111 1111"]
    assert nothing_possible_many(JoinedTexts(dated), DEFAULT) == [True, True, False]
    assert nothing_possible_many(JoinedTexts(dated), SCREENED) == [False, True, False]
    for odd in ["ask Person Number3", "id cust-3", "call 3123456789", "+-+ here", "Rom\u00e9"]:
        assert people.lets_go(JoinedTexts([plain, odd, plain])) == [True, False, True], odd


def test_a_batch_redacts_its_odd_turns_among_ordinary_ones() -> None:
    policy = dict.fromkeys(DEFAULTS, REDACT)
    screener = Screener(agent_id=1, policy=policy, people=_people())
    contents = ["plan a day in Rome", "write to marta.rossi@example.org", "ask Person Number3 first", "for us"]
    now = timezone.now()
    entries = [Entry(content=content, role="user", type="message", created_at=now) for content in contents]
    entries_screened(entries=entries, screener=screener, prefixes=[""] * len(entries), now=now)
    assert [e.content for e in entries] == ["plan a day in Rome", "write to [email]", "ask [person] first", "for us"]


def test_the_subject_index_reads_a_screened_batch_as_the_gate_does() -> None:
    """The strings screening's batch let past the people gate (kept in the write's memo) are not
    looked at again by the subject index, which answers for each row what it answers without them."""
    people = _people()
    screener = Screener(agent_id=1, policy=dict.fromkeys(DEFAULTS, REDACT), people=people)
    rng = random.Random(13)
    for _ in range(200):
        texts = _batch(rng)
        screener.texts_clear(texts)
        rows = [[text, None, {}, None, ""] for text in texts]
        assert people.rows_may_name(rows, screener.memo) == people.rows_may_name(rows)
    assert screener.memo.let_go[people.number]


# A value of each category, written as people write them (other scripts' digits, an IPv6 address, a
# private key's header, a keyword's assignment), and registered names with and without accents.
AWKWARD = [
    "card \u0664\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 \u0661\u0661\u0661\u0661",
    "card \uff14\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11",
    "iban DE89 3704 0044 0532 0130 00",
    "ip fe80::1ff:fe23:4567:890a",
    "-----BEGIN RSA PRIVATE KEY-----",
    "PASSWORD = 'hunter2'",
    "token ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ",
    "rssmraurtmlarsnl",
    *["Jose Garcia said hi", "Jos\u00e9 Garc\u00eda", "ZO\u00cb", "Muller met us", "Stra\u00dfe", "\ufb01ona"],
]


def test_a_turn_the_batch_lets_go_is_one_screening_alone_gives_back_unread() -> None:
    policy = dict.fromkeys(DEFAULTS, REDACT)
    names = ["jose garcia", "zoe", "muller", "strasse", "fiona"]
    people = PeopleMatcher([*((name, "name", name) for name in names), ("jane", "email", "jane@example.com")])
    texts = [text for odd in AWKWARD for text in ("plan a day in Rome", odd)]
    clear = Screener(agent_id=1, policy=policy, people=people).texts_clear(texts)
    assert clear == [text == "plan a day in Rome" for text in texts]
    for odd in AWKWARD:
        alone = Screener(agent_id=1, policy=policy, people=people)
        assert alone.text(odd, field="content") != odd, odd


# Pieces of turns as people write them with digits (times, prices, dates, counts, versions), phone-
# and card-shaped runs, an IBAN's start, an SSN, IP addresses, an `@`, and digit lookalikes: full-width
# digits and a superscript (not ASCII: such a text is read alone), letters that look like digits.
PIECES = [
    *["plan", "a", "day", "in", "Rome", "vegetarian,", "responsibilities", "RSSMRAURTMLARSNL", "x@y"],
    *["[12.5]", "07:45", "10:30:15", "$12.99", "4.5", "v1.2.3", "2026-12-05", "05/12/2026", "#3", "1,250"],
    *["312 345 6789", "+39", "(415)", "555-2671", "4111", "1111-1111", "4111111111111111", "DE89"],
    *["536-22-8173", "10.0.0.1", "::1", "2001:db8::1", "a1b2c3d4e5f6g7h8", "2026-12-05T01:11:17"],
    *["\uff14\uff11\uff11\uff11", "\uff11\uff12:\uff13\uff14", "\u00b2", "O0l1", "lO1OO"],
]
TURNS = st.lists(
    st.one_of(st.sampled_from(PIECES), st.text(alphabet="0123456789 .:-/+()$x", max_size=14)), max_size=8
).map(" ".join)
# What the batch's secret test looks for (`nothing_possible_many`): a text holding none of it is
# told by the batch exactly as alone.
SECRET_NEEDLES = ("key", "pass", "pwd", "secret", "contrase", "bearer", "putty")


def _reached(text: str, categories: list[str]) -> set[str]:
    """The categories whose check in `_findings` lets the text through to its detector (none is run)."""
    reached: set[str] = set()
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(recognizers, "detected", lambda category, text, memo=None: reached.add(category) or [])
        findings(text, categories)
    return reached


@pytest.mark.parametrize("categories", [DEFAULT, SCREENED], ids=["default", "all"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TURNS, max_size=6))
def test_the_gates_let_go_exactly_the_texts_no_check_lets_through(categories: list[str], texts: list[str]) -> None:
    """With digits, dates, prices, phone- and card-like runs: the shortcut lets an ASCII text go
    exactly when no enabled category's check lets it through to a detector (and so `findings` finds
    nothing), never a text that is not ASCII; the batch lets go what the shortcut does (less only
    where a secret keyword's part is, which the batch does not read further)."""
    for text, let_go in zip(texts, nothing_possible_many(JoinedTexts(texts), categories), strict=True):
        alone = nothing_possible(text, categories)
        if text.isascii():
            assert alone == (not _reached(text, categories)), text
        else:
            assert not alone and not let_go, text
        if any(needle in text.lower() for needle in SECRET_NEEDLES):
            assert alone or not let_go, text
        else:
            assert let_go == alone, text
        if let_go:
            assert not findings(text, categories), text
