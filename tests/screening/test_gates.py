"""The gates that let screening skip a detector (memoryapp.screening.literals, the pattern gates of
memoryapp.screening.recognizers) never skip a text that holds what the detector finds:

- properties: for every detect-secrets pattern with a literal gate and every Presidio recogniser
  with a pattern gate, strings hypothesis draws from the pattern itself (in any case the pattern
  allows, inside other text) all pass its gate;
- examples: over positive samples of every category (cards with spaces and dashes, IBANs with
  spaces, national ids, secrets as tokens, `key=value` and PEM blocks, next to e-mails and
  phones) and ordinary turns, the gated detectors find exactly the spans the ungated ones do;
- the gates are live with the libraries installed (a pattern that changed makes its gate fall
  away, and this says so).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import regex
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memoryapp.screening import recognizers
from memoryapp.screening.literals import literal_gate, required_literals
from memoryapp.screening.recognizers import MIN_SCORE

GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLE"
SLACK_TOKEN = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
STRIPE_KEY = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
JWT = "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"

SAMPLES = [
    # Ordinary turns and near misses.
    "Could you plan a day in Rome for us, starting early and avoiding the big queues?",
    "Send the tickets to marta.rossi@example.org or call +39 312 345 6789 if the train is late.",
    "at 06:30 to 19:45, version 1.2.3, room 4.5, order 4111 1111 1111 1112, see https://example.org/a?b=1",
    "hosts 192.168.14.27, ::ffff:10.0.0.1 and 2001:db8::ff00:42:8329",
    # No ASCII digit: fullwidth digits, the unspecified IPv6 address.
    "call \uff0b\uff14\uff14 \uff12\uff10 \uff17\uff19\uff14\uff16 \uff10\uff19\uff15\uff18 tonight",
    "listen on :: and nothing else",
    # Cards: spaces, dashes, none; Amex; next to a phone.
    "cards 4111 1111 1111 1111, 5500-0000-0000-0004, 378282246310005 and 6011000990139424",
    "pay with 4111-1111-1111-1111 or call (415) 555-2671",
    "card:4012888888881881;exp 12/29",
    # IBANs with spaces, without, lower-case after a word, at the end of a text.
    "IBAN GB82 WEST 1234 5698 7654 32 and DE89370400440532013000 2 days from now",
    "transfer to FR14 2004 1010 0505 0001 3M02 606",
    "NL91ABNA0417164300",
    # National ids.
    "my SSN is 536-22-8173, or 536 22 8173; NINO QQ 12 34 56 C and AB123456C",
    "codice fiscale RSSMRA85T10A562S, omocode RSSMRA85T10A56NH; PAN ABCPE1234F",
    "Aadhaar 2345 6789 0124, 234567890124, 2345-6789-0124; NIF 12345678Z, NIE X1234567L",
    "PESEL 44051401359; henkilötunnus 131052-308T; personnummer 19121212-1212",
    # An Italian fiscal code whose every digit is written as a letter (omocodia), in a text without digits.
    "codice fiscale RSSMRAURTMLARSNL, grazie",
    # Secrets: tokens, assignments, URLs with credentials, PEM and PuTTY keys.
    f"aws key {AWS_KEY} and github {GITHUB_TOKEN}",
    f"slack {SLACK_TOKEN}, stripe {STRIPE_KEY}",
    f"Authorization: Bearer {JWT}",
    "connect to https://bob:s3cr3tpw@db.example.org/app",
    "db password=hunter2hunter2 in the config; API_KEY = 'k3y-value-1'",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
    "AccountKey=lJzRc1YdHaAA2KCNJJ1tkYwF/+mKK6Ygw0NGe170Xu592euJv2wYUtBlV8z+qnlcNQSnIYVTkLWntUO1F8j8rQ==",
    "npm //registry.npmjs.org/:_authToken=abcdef01-2345-6789-abcd-ef0123456789",
    "sendgrid 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",
    # Non-ASCII around a secret (the case-insensitive gates are not tried then).
    "Inês' clé: password=ŝecretŝ and the \uff21\uff30\uff29 key xoxp-123456789012-1234567890123-aBcDeF",
    # Addresses inside punctuation, after a line break, a no-break and an ideographic space; tokens.
    "(ines@example.com),<bob@example.org>;\ncarl@example.net\u00a0dana@example.co.uk\u3000x@y",
    "keys: ghp_short, eyJhbGciOiJIUzI1NiJ9, AIzaSyA-1234567890abcdefghijklmnopqrstu and sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv",
]

# A value of each category as typed with lookalike characters, which the cheap checks and the
# detectors' pre-passes must let through to be found.
LOOKALIKES = [
    ("email", "ines.valdomiro\ufe6bexample.com"),
    ("email", "ines.valdomiro\uff20example\uff0ecom"),
    ("phone", "\ufe62351 912 345 678"),
    ("phone", "\uff0b\uff14\uff14 \uff12\uff10 \uff17\uff19\uff14\uff16 \uff10\uff19\uff15\uff18"),
    (
        "payment_card",
        "\uff14\uff11\uff11\uff11 \uff11\uff11\uff11\uff11 \uff11\uff11\uff11\uff11 \uff11\uff11\uff11\uff11",
    ),
    ("iban", "GB82 WEST \uff11\uff12\uff13\uff14 5698 7654 32"),
    ("national_id", "RSSMRA85T10A562S".translate({ord(c): 0xFF10 + int(c) for c in "0123456789"})),
    ("national_id", "\uff15\uff13\uff16-\uff12\uff12-\uff18\uff11\uff17\uff13"),
    ("ip_address", "\uff11\uff19\uff12.\uff11\uff16\uff18.\uff11\uff14.\uff12\uff17"),
    ("secret", "ghp_" + "\uff41" + "1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
]


def _ungated(monkeypatch: pytest.MonkeyPatch, category: str) -> Callable[[str], list[tuple[int, int]]]:
    """The category's detector built without any gate of this change."""
    with monkeypatch.context() as patched:
        patched.setattr(recognizers, "_PATTERN_GATES", {})
        patched.setattr(recognizers, "literal_gate", lambda pattern: None)
        patched.setattr(recognizers, "_EMAIL_WINDOWS", None)
        patched.setattr(recognizers, "_GATES_IN_WORDS", {})
        recognizers.detector.cache_clear()
        try:
            return recognizers.detector(category)
        finally:
            recognizers.detector.cache_clear()


@pytest.mark.parametrize(
    "category",
    [
        recognizers.SECRET,
        recognizers.PAYMENT_CARD,
        recognizers.IBAN,
        recognizers.NATIONAL_ID,
        recognizers.EMAIL,
        recognizers.PHONE,
        recognizers.IP_ADDRESS,
    ],
)
def test_the_gated_detectors_find_exactly_what_the_ungated_ones_do(
    monkeypatch: pytest.MonkeyPatch, category: str
) -> None:
    ungated = _ungated(monkeypatch, category)
    gated = recognizers.detector(category)
    found_somewhere = False
    for text in SAMPLES:
        expected = sorted(set(ungated(text)))
        found_somewhere |= bool(expected)
        assert sorted(set(gated(text))) == expected, text
        # And through the category's cheap checks too, as a write screens it.
        assert {(f.start, f.end) for f in recognizers.findings(text, [category])} == set(expected), text
    assert found_somewhere


def test_a_write_screening_every_category_finds_what_each_ungated_detector_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    categories = [c for c in recognizers.CATEGORIES if c != recognizers.PERSON]
    ungated = {category: _ungated(monkeypatch, category) for category in categories}
    for text in SAMPLES:
        expected = {(category, span) for category in categories for span in ungated[category](text)}
        found = {(f.category, (f.start, f.end)) for f in recognizers.findings(text, categories, recognizers.Memo())}
        assert found == expected, text


def test_secrets_of_each_kind_are_still_found_with_the_gates_on() -> None:
    detect = recognizers.detector(recognizers.SECRET)
    for text, secret in [
        (f"aws key {AWS_KEY}", AWS_KEY),
        (f"token {GITHUB_TOKEN}.", GITHUB_TOKEN),
        (f"slack {SLACK_TOKEN}", SLACK_TOKEN),
        (f"stripe {STRIPE_KEY}", STRIPE_KEY),
        (f"jwt {JWT}", JWT),
        ("db password=hunter2hunter2 in the config", "hunter2hunter2"),
        ("https://bob:s3cr3tpw@db.example.org/app", "s3cr3tpw"),
    ]:
        spans = detect(text)
        assert any(text[start:end].find(secret) >= 0 or secret.find(text[start:end]) >= 0 for start, end in spans), text
    pem = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----"
    assert (0, len(pem)) in detect(pem)


def _secret_patterns() -> Iterator[re.Pattern[str]]:
    from detect_secrets.plugins.base import RegexBasedDetector

    recognizers._import_plugin_modules()
    stack: list[type] = [RegexBasedDetector]
    while stack:
        plugin = stack.pop()
        stack.extend(plugin.__subclasses__())
        if plugin is not RegexBasedDetector and not getattr(plugin, "__abstractmethods__", None):
            yield from plugin().denylist  # type: ignore[attr-defined]


SECRET_PATTERNS = list(_secret_patterns())
GATED_SECRET_PATTERNS = [pattern for pattern in SECRET_PATTERNS if literal_gate(pattern) is not None]


def test_most_secret_patterns_have_a_literal_gate() -> None:
    assert len(GATED_SECRET_PATTERNS) >= len(SECRET_PATTERNS) * 3 // 4


@pytest.mark.parametrize("pattern", GATED_SECRET_PATTERNS, ids=lambda p: p.pattern.strip()[:40])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_string_a_secret_pattern_matches_passes_its_gate(pattern: re.Pattern[str], data: Any) -> None:
    gate = literal_gate(pattern)
    assert gate is not None
    around = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
    text = data.draw(around) + data.draw(st.from_regex(pattern)) + data.draw(around)
    assume(pattern.search(text) is not None)
    assert gate.may_match(text, text.lower() if text.isascii() else None), text


def _gated_recognizers() -> list[Any]:
    from presidio_analyzer.predefined_recognizers import CreditCardRecognizer, IbanRecognizer

    built = [*recognizers._national_id_recognizers(), CreditCardRecognizer(), IbanRecognizer()]
    return [r for r in built if type(r).__name__ in recognizers._PATTERN_GATES]


def test_every_pattern_gate_is_live_with_the_installed_presidio() -> None:
    live = {type(r).__name__ for r in _gated_recognizers() if recognizers._pattern_gate(r, min_score=MIN_SCORE)}
    assert live == set(recognizers._PATTERN_GATES)


def test_a_gate_falls_away_when_its_recognisers_patterns_change() -> None:
    from presidio_analyzer import Pattern
    from presidio_analyzer.predefined_recognizers import CreditCardRecognizer

    changed = CreditCardRecognizer(patterns=[Pattern("cards", r"\b\d{2}x\d{2}\b", 0.5)])
    assert recognizers._pattern_gate(changed, min_score=MIN_SCORE) is None


RECOGNISER_PATTERNS = [
    (recognizer, pattern)
    for recognizer in _gated_recognizers()
    for pattern in recognizers._kept_patterns(recognizer, min_score=MIN_SCORE)
]


@pytest.mark.parametrize(
    ("recognizer", "pattern"), RECOGNISER_PATTERNS, ids=[f"{type(r).__name__}-{p.name}" for r, p in RECOGNISER_PATTERNS]
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_string_a_recognisers_pattern_matches_passes_its_gate(recognizer: Any, pattern: Any, data: Any) -> None:
    flags = int(recognizer.global_regex_flags)
    own = regex.compile(pattern.regex, flags=flags)
    gate = recognizers._pattern_gate(recognizer, min_score=MIN_SCORE)
    assert gate is not None
    drawn = data.draw(st.from_regex(re.compile(pattern.regex, flags & (re.I | re.M | re.S))))
    text = data.draw(st.sampled_from(["", "ref ", "x"])) + drawn + data.draw(st.sampled_from(["", " end", "."]))
    assume(own.search(text) is not None)
    assert gate.search(text) is not None, text


@pytest.mark.parametrize(
    ("pattern", "flags", "strings"),
    [
        (r"ghp_[A-Za-z0-9]{36}", 0, {"ghp_"}),
        (r"(?:r|s)k_live_[0-9a-zA-Z]{24}", 0, {"rk_live_", "sk_live_"}),
        (r"xox(?:a|b|p)-\d+", re.I, {"xoxa-", "xoxb-", "xoxp-"}),
        (r"(?:\s|^)AKC[a-zA-Z0-9]{10,}", 0, {"AKC"}),
        (r"(?:api|)(?:key|pass)", re.I, {"key", "pass"}),
        (r"(?:BEGIN )+PRIVATE", 0, {"PRIVATE"}),
    ],
)
def test_required_literals_of_patterns(pattern: str, flags: int, strings: set[str]) -> None:
    found = required_literals(pattern, flags)
    assert found is not None
    assert set(found[0]) == strings
    assert found[1] == bool(flags & re.I)


@pytest.mark.parametrize(
    "pattern",
    [
        r"[a-z]{32}",  # nothing but a wide class
        r"(?:abc)?\d+",  # the literal may be absent
        r"(?i:secret)=\w+",  # a scoped flag: its case is not the pattern's
        r"abc|\d+",  # a branch that requires nothing
        r"(?<=key)\d+",  # a lookbehind is not part of the match
    ],
)
def test_no_literals_are_claimed_where_a_match_can_lack_them(pattern: str) -> None:
    found = required_literals(pattern)
    if found is not None:
        # Only what every match holds may be claimed: `=` is, in the scoped flag's case.
        assert pattern == r"(?i:secret)=\w+" and set(found[0]) == {"="}


def test_a_case_insensitive_gate_lets_a_non_ascii_text_through() -> None:
    gate = literal_gate(re.compile(r"password=\w+", re.I))
    assert gate is not None
    # U+017F (long s) matches `s` case-insensitively: the gate does not try a non-ASCII text.
    text = "PA\u017fSWORD=x"
    assert re.compile(r"password=\w+", re.I).search(text)
    assert gate.may_match(text, None)
    assert not gate.may_match("nothing here", "nothing here")


@pytest.mark.parametrize(("category", "value"), LOOKALIKES)
def test_a_value_typed_with_lookalikes_is_found_through_the_pre_passes(category: str, value: str) -> None:
    text = f"Hi there: {value}, thanks."
    spans = {(f.start, f.end) for f in recognizers.findings(text, [category], recognizers.Memo())}
    at = text.index(value)
    assert any(start <= at + 1 and end >= at + len(value) - 1 for start, end in spans), (value, spans)


_AROUND_AN_ADDRESS = st.text(
    alphabet=st.sampled_from(list("ab.-_@+'!x9 \t\n\x1c\u00a0\u3000\u2028(),;<>\"\uff20\ufe6b\u00e9\u0301\u200c")),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    before=_AROUND_AN_ADDRESS,
    local=st.sampled_from(["ines", "a", "marta.rossi", "x+y", "o'neil", "_u"]),
    domain=st.sampled_from(["example.com", "example.co.uk", "b.c", "localhost", "ex-ample.org"]),
    between=_AROUND_AN_ADDRESS,
    after=_AROUND_AN_ADDRESS,
)
def test_the_email_detector_finds_in_its_windows_what_it_finds_in_the_whole_text(
    before: str, local: str, domain: str, between: str, after: str
) -> None:
    """The e-mail detector reads each word holding an `@` alone (`_EMAIL_WINDOWS`), its spans kept
    by the word in a write's memo: the same spans as over the whole text, with the memo or without."""
    text = f"{before}{local}@{domain}{between}{local}@{domain}{after}"
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(recognizers, "_EMAIL_WINDOWS", None)
        recognizers.detector.cache_clear()
        whole = recognizers.detector(recognizers.EMAIL)
    recognizers.detector.cache_clear()
    windowed = recognizers.detector(recognizers.EMAIL)
    expected = sorted(set(whole(text)))
    assert sorted(set(windowed(text))) == expected
    memo = recognizers.Memo()
    assert sorted(set(windowed(text, memo.parsed))) == expected
    assert sorted(set(windowed("x " + text, memo.parsed))) == [(s + 2, e + 2) for s, e in expected]


def _detected_secret_patterns() -> list[tuple[re.Pattern[str], int]]:
    """The patterns the secret detector runs, each with the group it takes (0: the whole match)."""
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.ip_public import IPPublicDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector

    recognizers._import_plugin_modules()
    found: list[tuple[re.Pattern[str], int]] = []
    stack: list[type] = [RegexBasedDetector]
    while stack:
        plugin = stack.pop()
        stack.extend(plugin.__subclasses__())
        left_out = issubclass(plugin, (IPPublicDetector, PrivateKeyDetector)) or plugin is RegexBasedDetector
        if not left_out and not getattr(plugin, "__abstractmethods__", None):
            found += [(pattern, 0) for pattern in plugin().denylist]  # type: ignore[attr-defined]
    return found + [(pattern, min(pattern.groups, 1)) for pattern in recognizers._OWN_SECRET_PATTERNS]


DETECTED_SECRET_PATTERNS = _detected_secret_patterns()


@pytest.mark.parametrize(("pattern", "group"), DETECTED_SECRET_PATTERNS, ids=lambda p: str(p).strip()[:40])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_match_of_a_secret_pattern_is_found_past_the_pre_pass(
    pattern: re.Pattern[str], group: int, data: Any
) -> None:
    """The secret detector asks a group of rare gates only when one of their strings is in the text
    (one alternation a group): every match of each pattern, drawn inside other text, is still found."""
    around = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
    text = data.draw(around) + data.draw(st.from_regex(pattern)) + data.draw(around)
    expected = {match.span(group) for match in pattern.finditer(text)}
    assume(expected)
    assert expected <= set(recognizers.detector(recognizers.SECRET)(text)), text


# Turns with digits as people write them (times, prices, dates, versions, counts), phone- and
# card-shaped runs, IBAN- and SSN-shaped ones, IP addresses, and digit lookalikes (full-width digits
# and a superscript: not ASCII, such a text is read alone; letters that look like digits).
DIGIT_PIECES = [
    *["plan", "a", "day", "in", "Rome", "at", "for", "call", "card", "iban", "x@y.org"],
    *["[12.5]", "07:45", "10:30:15", "$12.99", "4.5", "v1.2.3", "2026-12-05", "05/12/2026", "#3", "1,250"],
    *["+39 312 345 6789", "(415) 555-2671", "4111 1111 1111 1111", "4111-1111-1111-1111", "378282246310005"],
    *["DE89 3704 0044 0532 0130 00", "536-22-8173", "10.0.0.1", "192.168.14.27", "2001:db8::1", "::1"],
    *["\uff14\uff11\uff11\uff11 \uff11\uff11\uff11\uff11", "\u00b2", "O0l1", "2026-12-05T01:11:17"],
]


@pytest.mark.parametrize("policy", ["default", "all"])
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    words=st.lists(
        st.one_of(st.sampled_from(DIGIT_PIECES), st.text(alphabet="0123456789 .:-/+()$", max_size=16)), max_size=8
    )
)
def test_a_turn_with_digits_the_shortcut_lets_go_holds_nothing_any_ungated_detector_finds(
    monkeypatch: pytest.MonkeyPatch, policy: str, words: list[str]
) -> None:
    """`nothing_possible` lets turns with digits go when no enabled category's check passes (the
    default policy: fewer than a card's 12 digits and no secret); every such turn is one in which the
    category's detector, without any gate, finds nothing."""
    from memoryapp.screening.policy import ALLOW, DEFAULTS

    categories = [
        c for c in recognizers.CATEGORIES if c != recognizers.PERSON and (policy == "all" or DEFAULTS[c] != ALLOW)
    ]
    ungated = _UNGATED.get(tuple(categories))
    if ungated is None:
        ungated = _UNGATED[tuple(categories)] = {c: _ungated(monkeypatch, c) for c in categories}
    text = " ".join(words)
    if recognizers.nothing_possible(text, categories):
        assert text.isascii(), text
        for category in categories:
            assert not ungated[category](text), (category, text)


_UNGATED: dict[tuple[str, ...], dict[str, Callable[[str], list[tuple[int, int]]]]] = {}
