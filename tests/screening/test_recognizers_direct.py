"""Screening runs Presidio's pattern recognisers directly (their compiled patterns, validation and
scores) and behind cheap gates (memoryapp.screening.recognizers): over texts holding a match of
every recogniser, near misses and ordinary turns, it finds exactly the spans Presidio's own
`analyze` finds scoring at least MIN_SCORE."""

from __future__ import annotations

import pytest

from memoryapp.screening import recognizers
from memoryapp.screening.recognizers import MIN_SCORE, PHONE_REGIONS, findings

TEXTS = [
    "Could you plan a day in Rome for us, starting early and avoiding the big queues?",
    "Send the tickets to marta.rossi@example.org or call +39 312 345 6789 if the train is late.",
    "my SSN is 536-22-8173, or 536 22 8173, not 53622-8173 nor 536-228173 nor 536228173",
    "NINO QQ 12 34 56 C and AB123456C; NIF 12345678Z, NIE X1234567L, Y7654321G",
    "codice fiscale RSSMRA85T10A562S; PESEL 44051401359; henkilötunnus 131052-308T",
    "personnummer 19121212-1212 or 121212-1212 or 8112189876; Aadhaar 2345 6789 0124, 234567890124",
    "PAN ABCPE1234F or abcde1234f, order ref AB12CD34EF5 and ticket XY-1234-ABCD",
    "cards 4111 1111 1111 1111, 5500-0000-0000-0004, 378282246310005, 1234 5678 9012 3456",
    "IBAN GB82 WEST 1234 5698 7654 32 and DE89370400440532013000 2 days from now, NL00 ABCD 0000",
    "hosts 192.168.14.27, 10.0.0.0/8, 999.1.1.1, ::1, ::, 2001:db8::ff00:42:8329, ::ffff:10.0.0.1",
    "at 06:30 to 19:45, version 1.2.3, room 4.5, fe80::1%eth0 and 1:2:3:4:5:6:7:8",
    "phones +351 912 345 678, (415) 555-2671, 020 7946 0958, +44 20 7946 0958, 555-0100",
    "mail Ines.Valdomiro@example.com, bob@localhost, a@b.c, x@example.invalid",
]


def _presidio_spans(category: str, text: str) -> set[tuple[int, int]]:
    """What Presidio's recognisers of the category answer through their own `analyze`."""
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
    )

    built = {
        "email": lambda: [recognizers._offline_email_recognizer()],
        "phone": lambda: [PhoneRecognizer(supported_regions=PHONE_REGIONS)],
        "payment_card": lambda: [CreditCardRecognizer()],
        "iban": lambda: [IbanRecognizer()],
        "ip_address": lambda: [IpRecognizer()],
        "national_id": recognizers._national_id_recognizers,
    }[category]()
    return {
        (result.start, result.end)
        for recognizer in built
        for result in recognizer.analyze(text, recognizer.supported_entities, None)  # type: ignore[attr-defined]
        if result.score >= MIN_SCORE
    }


@pytest.mark.parametrize("category", ["email", "phone", "payment_card", "iban", "ip_address", "national_id"])
def test_screening_finds_what_presidios_analyze_finds(category: str) -> None:
    found_somewhere = False
    for text in TEXTS:
        expected = _presidio_spans(category, text)
        found_somewhere |= bool(expected)
        assert {(f.start, f.end) for f in findings(text, [category])} == expected, text
    assert found_somewhere


def test_patterns_that_can_never_score_enough_are_not_run() -> None:
    from presidio_analyzer.predefined_recognizers import InPanRecognizer, UsSsnRecognizer

    # SSN1-4 (0.05) and PAN Medium/Low (0.1, 0.01): no validation can raise them to MIN_SCORE.
    ssn = recognizers._patterns(UsSsnRecognizer(), min_score=MIN_SCORE)
    pan = recognizers._patterns(InPanRecognizer(), min_score=MIN_SCORE)
    assert ssn("536228173 and 53622-8173") == []
    assert pan("abcde1234f") == []
    assert ssn("536-22-8173") == [(0, 11)]
