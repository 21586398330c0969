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
]


def _ungated(monkeypatch: pytest.MonkeyPatch, category: str) -> Callable[[str], list[tuple[int, int]]]:
    """The category's detector built without any gate of this change."""
    with monkeypatch.context() as patched:
        patched.setattr(recognizers, "_PATTERN_GATES", {})
        patched.setattr(recognizers, "literal_gate", lambda pattern: None)
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
