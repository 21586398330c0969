"""What screening finds in a text: the spans of each category, by maintained recognisers.

- Presidio's pattern recognisers (presidio-analyzer) for e-mail, payment card (with its Luhn
  check), IBAN (with its mod-97 check), IP addresses and national ids (each country's recogniser
  with its checksum where it has one). They are called one by one, each with its own
  `analyze`, without Presidio's AnalyzerEngine: the engine needs an NLP engine, and its only
  built-in ones load a spaCy or Stanza model that would be downloaded at run time. A pattern
  recogniser needs no model (its `nlp_artifacts` only boost scores by context words), so
  nothing is downloaded and nothing but regular expressions and checksums runs.
- Presidio's e-mail recogniser checks the domain with `tldextract`, whose default extractor
  fetches the Public Suffix List from the internet on first use. It is given an extractor that
  reads the snapshot shipped in the tldextract wheel instead (`suffix_list_urls=()`).
- `phonenumbers` (Google's libphonenumber) through Presidio's PhoneRecognizer for phones.
- detect-secrets' plugins for credentials and secrets: its regex detectors (AWS, GitHub,
  GitLab, Slack, Stripe, OpenAI, JWT, private keys, ...) and its keyword detector for
  `password=...`-style assignments. Its two high-entropy detectors are left out: they flag any
  long random-looking string (ids, hashes, UUIDs), which would refuse ordinary turns.

Each detector is built once per process, before the web server and the workers fork
(`screening_warm_up`).
"""

from __future__ import annotations

import functools
import itertools
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from memoryapp.screening.batch import JoinedTexts
from memoryapp.screening.literals import literal_gate

# The categories of the policy (memoryapp.screening.policy), in the order they are looked for.
EMAIL = "email"
PHONE = "phone"
PAYMENT_CARD = "payment_card"
IBAN = "iban"
NATIONAL_ID = "national_id"
IP_ADDRESS = "ip_address"
SECRET = "secret"
PERSON = "person"
CATEGORIES = (SECRET, PAYMENT_CARD, IBAN, NATIONAL_ID, EMAIL, PHONE, IP_ADDRESS, PERSON)

# Presidio's scores: a pattern recogniser gives a validated match (checksum passed) 1.0 and a bare
# pattern its own weak score (0.01-0.6); below this the match is a guess we do not act on.
MIN_SCORE = 0.4

# Regions phonenumbers reads a number without a country code in; a number written with `+` and its
# country code is found in any. Presidio's PhoneRecognizer runs phonenumbers' matcher once per
# region, about 0.2 ms a region for a turn holding digits: two regions, not Presidio's eight.
PHONE_REGIONS = ("US", "GB")


@dataclass(frozen=True)
class Finding:
    category: str
    start: int
    end: int


# What one write has worked out about spans (`Memo.parsed`): a detector's verdict on a piece of text
# that depends on that piece alone (a phone candidate's parse and validation, a pattern match's
# checksum), keyed by the detector's own key. Spans repeated within a write (the same e-mail address
# or phone number in several turns of a batch) are parsed and checked once.
Parsed = dict[tuple[Any, ...], Any]


class Detector(Protocol):
    def __call__(self, text: str, parsed: Parsed | None = None) -> list[tuple[int, int]]: ...


Run = Callable[[str, "Parsed | None"], Iterable[tuple[int, int]]]


def _presidio(recognizers: Iterable[object], *, min_score: float = MIN_SCORE) -> Detector:
    """The spans Presidio's recognisers find scoring at least `min_score`. A plain pattern
    recogniser (one that keeps PatternRecognizer's `analyze`) is run by `_patterns`, which gives
    the same spans without Presidio's per-match bookkeeping; the others (IBAN's, the phone one)
    through their own `analyze`. A recogniser is skipped for a text without the run of digits it
    needs (`_DIGIT_RUNS`) or without a match of its gate (`_pattern_gate`)."""
    from presidio_analyzer import PatternRecognizer

    runs: list[tuple[int, Any, Run]] = []
    for recognizer in recognizers:
        run_of_digits = _DIGIT_RUNS.get(type(recognizer).__name__, 0)
        plain = isinstance(recognizer, PatternRecognizer) and type(recognizer).analyze is PatternRecognizer.analyze
        gate = _pattern_gate(recognizer, min_score=min_score)
        if plain:
            runs.append((run_of_digits, gate, _patterns(recognizer, min_score=min_score)))
        else:
            runs.append((run_of_digits, gate, _analyzed(recognizer, min_score=min_score)))
    gated = any(wanted for wanted, _, _ in runs)

    def detect(text: str, parsed: Parsed | None = None) -> list[tuple[int, int]]:
        longest = max(map(len, _digit_runs(text)), default=0) if gated else 0
        return [
            span
            for wanted, gate, run in runs
            if longest >= wanted and (gate is None or gate.search(text) is not None)
            for span in run(text, parsed)
        ]

    return detect


# National id recognisers whose every pattern needs a run of this many digits in a row (NIF and NIE
# `[0-9]{7}`, PESEL eleven, the Finnish and Swedish ids `\d{6}`): a text without one is not read by them.
_DIGIT_RUNS = {
    "EsNifRecognizer": 7,
    "EsNieRecognizer": 7,
    "PlPeselRecognizer": 11,
    "FiPersonalIdentityCodeRecognizer": 6,
    "SePersonnummerRecognizer": 6,
}
_DIGIT_RUN = re.compile(r"\d+")

# A part every match of a recogniser's patterns holds, as a pattern of its own: searched first with
# the recogniser's own engine and flags (`regex`, case-insensitive for most), a text without a
# match of it holds no match of theirs. Read from the patterns of presidio-analyzer 2.2, pinned to
# them (`_patterns_pin`: a digest of the patterns that run and their flags): a recogniser whose
# patterns differ from these runs ungated (tests/screening/test_gates.py says which).
#
# - UK NINO `\b(?!..)LL ?DD ?DD ?DD ?L\b`: its digit pairs and last letter, `DD ?DD ?DD ?L`.
# - Italian fiscal code: 16 characters in a row, each of a class within `[A-Z\d]` (case-insensitive).
# - Indian PAN (the patterns that can score MIN_SCORE: `...[0-9]{4}[A-Za-z]`): four digits and a letter.
# - Aadhaar `[0-9]{12}` or `[0-9]{4}[- :][0-9]{4}[- :][0-9]{4}`: eight digits, maybe split once.
# - Card `(4\d{3}|5[0-5]\d{2}|6\d{3}|1\d{3}|3\d{3})[- ]?(\d{3,4})...`: four digits, maybe a
#   dash or a space, three digits.
# - IBAN `(?<![A-Z0-9])([A-Z]{2}[0-9]{2}(?:[ -]?[A-Z0-9]{4}){2,6})...` (case-sensitive): two capitals, two digits.
# - US SSN (the pattern that can score MIN_SCORE: `\b([0-9]{3})[- .]([0-9]{2})[- .]([0-9]{4})\b`): its
#   first two groups and their separators (a phone's `312 345 6789` has none: 2 against 1 us a turn).
_PATTERN_GATES: dict[str, tuple[str, str]] = {
    "UsSsnRecognizer": ("835244e3e2849840", r"[0-9]{3}[- .][0-9]{2}[- .]"),
    "UkNinoRecognizer": ("d5bafd06f66afb5a", r"[0-9]{2} ?[0-9]{2} ?[0-9]{2} ?[a-dA-D]"),
    "ItFiscalCodeRecognizer": ("233e023f91e73422", r"[A-Z\d]{16}"),
    "InPanRecognizer": ("a219713037ceea8b", r"[0-9]{4}[A-Za-z]"),
    "InAadhaarRecognizer": ("105de7dbe845a8d0", r"[0-9]{4}[- :]?[0-9]{4}"),
    "CreditCardRecognizer": ("cf379d198a8cbbfb", r"\d{4}[- ]?\d{3}"),
    "IbanRecognizer": ("1fdb0622b8bc5622", r"[A-Z]{2}[0-9]{2}"),
}


def _kept_patterns(recognizer: Any, *, min_score: float) -> list[Any]:
    """The patterns of a recogniser that can give a result scoring `min_score`: all of them for
    one that validates its matches or has its own `analyze`; else those whose own score reaches it
    (a weak one, `SSN1 (very weak)` 0.05 or `PAN (Low)` 0.01, never does)."""
    from presidio_analyzer import PatternRecognizer

    plain = isinstance(recognizer, PatternRecognizer) and type(recognizer).analyze is PatternRecognizer.analyze
    validates = type(recognizer).validate_result is not PatternRecognizer.validate_result
    if not plain or validates:
        return list(recognizer.patterns)
    return [pattern for pattern in recognizer.patterns if pattern.score >= min_score]


def _patterns_pin(recognizer: Any, *, min_score: float) -> str:
    import hashlib

    kept = _kept_patterns(recognizer, min_score=min_score)
    described = "\n".join([str(int(recognizer.global_regex_flags)), *(pattern.regex for pattern in kept)])
    return hashlib.sha256(described.encode()).hexdigest()[:16]


def _pattern_gate(recognizer: Any, *, min_score: float) -> Any:
    """The recogniser's gate (`_PATTERN_GATES`), compiled with its flags; None when it has none or
    its patterns are not the ones the gate was read from."""
    import regex

    pinned = _PATTERN_GATES.get(type(recognizer).__name__)
    if pinned is None or pinned[0] != _patterns_pin(recognizer, min_score=min_score):
        return None
    gate = regex.compile(pinned[1], flags=recognizer.global_regex_flags)
    within = _GATES_IN_WORDS.get(type(recognizer).__name__)
    return gate if within is None else _InLongWords(gate, within)


# Gates whose every match is this many characters none of which is whitespace (the Italian fiscal
# code's 16 letters and digits): a match is inside one of the text's words (`str.split`'s) at least
# that long, and the gate has no assertion reading around it, so it is searched in those words
# alone. A turn holding an e-mail address or a URL has one or two: 1 against 4 us a turn.
_GATES_IN_WORDS = {"ItFiscalCodeRecognizer": 16}


class _InLongWords:
    """A gate (`_pattern_gate`) searched in the text's words of at least `fewest` characters."""

    def __init__(self, gate: Any, fewest: int) -> None:
        self.gate, self.fewest = gate, fewest

    def search(self, text: str) -> Any:
        for word in _words(text):
            if len(word) >= self.fewest:
                found = self.gate.search(word)
                if found is not None:
                    return found
        return None


def _analyzed(recognizer: Any, *, min_score: float) -> Run:
    entities = recognizer.supported_entities

    def run(text: str, parsed: Parsed | None = None) -> list[tuple[int, int]]:
        return [(r.start, r.end) for r in recognizer.analyze(text, entities, None) if r.score >= min_score]

    return run


def _patterns(recognizer: Any, *, min_score: float) -> Run:
    """A Presidio pattern recogniser's matches as its `analyze` scores them (a pattern's own score;
    1.0 or 0 when the recogniser's `validate_result` says yes or no; 0 when `invalidate_result`
    says yes), those scoring at least `min_score`, with its regular expressions compiled once with
    its flags. What its `analyze` spends besides (a timestamp, an explanation object and a result
    of each match) is left out, and so is a pattern that can never score `min_score`: a weak
    one (`SSN1 (very weak)` 0.05, `PAN (Low)` 0.01) of a recogniser without a validation.

    `validate_result` and `invalidate_result` read the matched string alone (a checksum, a domain
    looked up in the suffix list), so their verdict on a string is kept in the write's `parsed`
    and not worked out again for the same string in another turn or another pattern."""
    import regex
    from presidio_analyzer import PatternRecognizer

    validates = type(recognizer).validate_result is not PatternRecognizer.validate_result
    invalidates = type(recognizer).invalidate_result is not PatternRecognizer.invalidate_result
    compiled = [
        (regex.compile(pattern.regex, flags=recognizer.global_regex_flags), pattern.score)
        for pattern in _kept_patterns(recognizer, min_score=min_score)
    ]
    validate, invalidate = recognizer.validate_result, recognizer.invalidate_result
    own = ("pattern", type(recognizer).__qualname__, id(recognizer))

    def verdict(found: str) -> tuple[bool | None, bool]:
        """(`validate_result`, `invalidate_result`) of a matched string, each None when not asked."""
        return (validate(found) if validates else None, bool(invalidate(found)) if invalidates else False)

    def run(text: str, parsed: Parsed | None = None) -> list[tuple[int, int]]:
        spans: list[tuple[int, int, float]] = []
        for pattern, score in compiled:
            for match in pattern.finditer(text):
                start, end = match.span()
                if start == end:
                    continue
                found = text[start:end]
                kept = score
                if validates or invalidates:
                    if parsed is None:
                        valid, invalid = verdict(found)
                    else:
                        key = (own, found)
                        known = parsed.get(key)
                        if known is None:
                            known = parsed[key] = verdict(found)
                        valid, invalid = known
                    if valid is not None:
                        kept = 1.0 if valid else 0.0
                    if invalid:
                        kept = 0.0
                if kept > 0 and kept >= min_score:
                    spans.append((start, end, kept))
        if len(spans) < 2:
            return [(start, end) for start, end, _ in spans]
        # As Presidio's `remove_duplicates`: a match inside another scoring as much is not a result.
        return [
            (start, end)
            for start, end, kept in set(spans)
            if not any((s, e) != (start, end) and s <= start and end <= e and kept <= k for s, e, k in spans)
        ]

    return run


def _phones(recognizer: Any) -> Detector:
    """Presidio's PhoneRecognizer as its `analyze` runs it: phonenumbers' matcher over the text once
    per region, every match kept (its score, 0.4, is MIN_SCORE); without the parse of each match
    `analyze` makes only to name its region in an explanation. A candidate written with its `+` and
    country code parses and verifies the same whatever the region the matcher reads the text in (the
    region is only for numbers without one), so the second region's matcher reuses the first's
    answer for it instead of parsing it again. Not one whose digits after the `+` begin with no
    country code (`+011 44 ...`, `+0044 ...`: an international prefix): phonenumbers reads those
    again without the `+` in the region, whose prefix it strips (the US's `011`, the UK's `00`), so
    each region has its own answer (`_country_code_written`).

    What the matcher's `_parse_and_verify(candidate, offset)` answers depends on the text only
    through the candidate and the two characters around it (a Latin letter or a currency sign
    next to the digits rules them out): the parse and the validation read the candidate, the
    region and the leniency, and the grouping checks of the stricter leniencies the parsed number
    and the candidate. So its answer (the number, or none) is kept by that key in the write's
    `parsed`: a number repeated in the turns of a batch is parsed and validated once."""
    import phonenumbers
    from phonenumbers.phonenumbermatcher import PhoneNumberMatch, PhoneNumberMatcher

    regions, leniency = list(recognizer.supported_regions), recognizer.leniency
    assert recognizer.SCORE >= MIN_SCORE
    # phonenumbers compiles its metadata's patterns with `re.compile` as it uses them, and they fell
    # out of the re module's cache (512 patterns, shared with everything else the process runs): a
    # write's phone numbers had theirs compiled again and again (`_match_national_number`, some 5%
    # of screening's time in bench/screening.py). Kept once compiled, from now on (its own switch).
    phonenumbers.enable_pattern_cache()
    lead = _phone_lead()

    class Matcher(PhoneNumberMatcher):  # type: ignore[misc]
        def __init__(self, text: str, region: str, parsed: Parsed) -> None:
            super().__init__(text, region, leniency=leniency)
            self.parsed = parsed
            self.read_in_region = False  # whether a candidate without its country code was parsed

        def has_next(self) -> bool:
            """The matcher's `has_next`, its next search begun `lead` characters before the next digit
            rather than where the last match ended, and not made when no digit is left (`_phone_lead`):
            its pattern, which opens with optional parts, was tried at every place of the prose before
            and after a number (a turn of bench/screening.py with its number parsed already: 11.9
            against 9.6 us, the fastest of 300 runs each on a busy machine)."""
            if lead is not None and self._state == PhoneNumberMatcher._NOT_READY:
                digit = _ANY_DIGIT.search(self.text, self._search_index)
                if digit is None:
                    self._state = PhoneNumberMatcher._DONE
                elif digit.start() - lead > self._search_index:
                    self._search_index = digit.start() - lead
            return bool(super().has_next())

        def _parse_and_verify(self, candidate: str, offset: int) -> Any:
            text, end = self.text, offset + len(candidate)
            # Any region reads a number written with its country code alike (see above).
            plus = False
            if candidate.startswith(_PLUS_SIGNS):
                # A verdict on the candidate alone: kept with the write's, once a candidate.
                written = ("phone-country-code", candidate)
                known = self.parsed.get(written)
                if known is None:
                    known = self.parsed[written] = _country_code_written(candidate)
                plus = bool(known)
            self.read_in_region = self.read_in_region or not plus
            key = (
                "phone",
                leniency,
                "+" if plus else self.preferred_region,
                candidate,
                text[offset - 1] if offset > 0 else "",
                text[end] if end < len(text) else "",
            )
            if key in self.parsed:
                number = self.parsed[key]
                return None if number is None else PhoneNumberMatch(offset, candidate, number)
            match = super()._parse_and_verify(candidate, offset)
            self.parsed[key] = None if match is None else match.number
            return match

    assert phonenumbers.PhoneNumberMatcher is PhoneNumberMatcher

    def detect(text: str, parsed: Parsed | None = None) -> list[tuple[int, int]]:
        """Every region's matches, in the regions' order. The matcher's way through a text (its
        candidates, what it tries inside one it rejects, when it gives up) turns only on what
        `_parse_and_verify` answers: when the first region's matcher parsed no candidate but ones
        written with their country code, another region's would parse the same candidates with the
        same answers and find the same numbers, so it is not run."""
        known: Parsed = {} if parsed is None else parsed
        first = Matcher(text, regions[0], known)
        found = [(match.start, match.end) for match in first]
        spans = list(found)
        for region in regions[1:]:
            if first.read_in_region:
                spans.extend((match.start, match.end) for match in Matcher(text, region, known))
            else:
                spans.extend(found)
        return spans

    return detect


@functools.cache
def _phone_lead() -> int | None:
    """The most characters a match of phonenumbers' candidate pattern (`_PATTERN`) holds before its
    first digit, read from the pattern itself: it opens with its leading part (up to two brackets or
    plus signs, each followed by up to four punctuation marks: 10 characters), then a run of digits
    (`\\d{1,20}`). None when it does not open so (another version of the library).

    So no match begins more than `lead` characters before the first digit at or after where it
    begins: a search begun that far before the next digit finds the match a search begun earlier
    finds (a match at a place is the same whichever place the search began at: `re` reads what is
    before `pos` for a lookbehind, `^` or `\\b`), as the places skipped hold none. With no digit
    left, there is none."""
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parser  # type: ignore[attr-defined]

    from phonenumbers.phonenumbermatcher import _PATTERN

    parsed = sre_parser.parse(_PATTERN.pattern, _PATTERN.flags)
    if len(parsed) < 2:
        return None
    lead = sre_parser.SubPattern(parsed.state, [parsed[0]]).getwidth()[1]
    op, arguments = parsed[1]
    digit = [(sre_constants.IN, [(sre_constants.CATEGORY, sre_constants.CATEGORY_DIGIT)])]
    opens_with_digits = op is sre_constants.MAX_REPEAT and arguments[0] >= 1 and list(arguments[2]) == digit
    return int(lead) if opens_with_digits and lead < sre_constants.MAXREPEAT else None


# The plus signs phonenumbers reads as the start of a country code (phonenumberutil._PLUS_CHARS).
_PLUS_SIGNS = ("+", "\uff0b")


def _country_code_written(candidate: str) -> bool:
    """Whether phonenumbers' parse of a candidate starting with `+` takes its country code from the
    digits after it whatever the region (then only the number's own region's metadata is read).
    Its parse strips the plus signs and reads the digits (letters turned into digits when it holds
    three); their first one to three are the country code unless they begin with `0` or with no
    code it knows, and then it reads them again without the `+` in the default region, stripping
    that region's international prefix (`+011 44 20 7946 0958` is a UK number in the US and none in
    the UK). A candidate with a letter (an extension, a vanity number) is read in each region."""
    from phonenumbers.phonenumberutil import COUNTRY_CODE_TO_REGION_CODE

    if candidate.isascii():
        if _ASCII_LETTER.search(candidate) is not None:
            return False
    elif any(char.isalpha() for char in candidate):
        return False
    digits = _digits_only(candidate)
    return digits[:1] not in ("", "0") and any(
        int(digits[:n]) in COUNTRY_CODE_TO_REGION_CODE for n in (1, 2, 3) if len(digits) >= n
    )


_ASCII_LETTER = re.compile(r"[A-Za-z]")
_NOT_ASCII_DIGITS = re.compile(r"[^0-9]+")


def _digits_only(text: str) -> str:
    """phonenumbers' `normalize_digits_only`: each character with a Unicode digit value as its ASCII
    digit, the rest left out. An ASCII text's only such characters are 0-9, so it is read with one
    substitution in C (the library's loop asks `unicodedata.digit` of each character: 25.6 against
    6.0 us a candidate of bench/screening.py --distinct-contacts, where the phone detector spends
    100-160 us on a new number)."""
    if text.isascii():
        return _NOT_ASCII_DIGITS.sub("", text)
    from phonenumbers import normalize_digits_only

    return str(normalize_digits_only(text))


@functools.cache
def _phone_fewest() -> int:
    """The fewest digits a valid phone number has (country code and national number: 6, `+43 1110`;
    a national number read in the US or the UK is longer), read from phonenumbers' metadata, not
    assumed."""
    from phonenumbers.phonemetadata import PhoneMetadata
    from phonenumbers.phonenumberutil import COUNTRY_CODES_FOR_NON_GEO_REGIONS, SUPPORTED_REGIONS

    fewest: int | None = None
    for metadata in [
        *(PhoneMetadata.metadata_for_region(region) for region in SUPPORTED_REGIONS),
        *(PhoneMetadata.metadata_for_nongeo_region(code) for code in COUNTRY_CODES_FOR_NON_GEO_REGIONS),
    ]:
        general = metadata.general_desc if metadata is not None else None
        lengths = [length for length in (general.possible_length or ()) if length > 0] if general is not None else []
        if metadata is not None and lengths:
            digits = len(str(metadata.country_code)) + min(lengths)
            fewest = digits if fewest is None else min(fewest, digits)
    assert fewest is not None, "phonenumbers' metadata gives no number lengths"
    return fewest


@functools.cache
def _phone_run() -> re.Pattern[str]:
    """What a text must hold for phonenumbers' matcher to find a number in it: a run of digits (any
    script's: the matcher reads them all) joined by at most four of its punctuation marks between
    two digits (spaces, dots, dashes, slashes, brackets, `x`: its `_PATTERN` joins the blocks of a
    candidate so), holding at least as many digits as the shortest valid number has (`_phone_fewest`).

    Every number the matcher answers is a candidate of `_PATTERN` (or a part of one), parsed and
    found valid, so its digits are one such run and number at least the shortest valid number's."""
    from phonenumbers.phonenumberutil import _REGEX_FLAGS, _VALID_PUNCTUATION

    fewest = _phone_fewest()
    # The punctuation and the digits are disjoint: each repetition is one digit after at most four
    # marks, so the search never backtracks into a run it has read.
    return re.compile(rf"\d(?:[{_VALID_PUNCTUATION}]{{0,4}}\d){{{fewest - 1},}}", _REGEX_FLAGS)


def phone_possible(text: str) -> bool:
    """Whether phonenumbers' matcher could find a number in the text (`_phone_run`): a text without
    a phone-shaped run of digits (a date, a price, a time, a short code) is not given to it."""
    return _phone_run().search(text) is not None


@functools.cache
def _offline_email_recognizer() -> object:
    import tldextract
    from presidio_analyzer.predefined_recognizers import EmailRecognizer

    # The Public Suffix List shipped in the wheel, never fetched (see the module's docstring).
    offline = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    class OfflineEmailRecognizer(EmailRecognizer):  # type: ignore[misc]
        def validate_result(self, pattern_text: str) -> bool:
            return bool(offline(pattern_text).fqdn)

    return OfflineEmailRecognizer()


def _national_id_recognizers() -> list[object]:
    from presidio_analyzer.predefined_recognizers import (
        EsNieRecognizer,
        EsNifRecognizer,
        FiPersonalIdentityCodeRecognizer,
        InAadhaarRecognizer,
        InPanRecognizer,
        ItFiscalCodeRecognizer,
        PlPeselRecognizer,
        SePersonnummerRecognizer,
        UkNinoRecognizer,
        UsSsnRecognizer,
    )

    return [
        UsSsnRecognizer(),
        UkNinoRecognizer(),
        EsNifRecognizer(),
        EsNieRecognizer(),
        ItFiscalCodeRecognizer(),
        PlPeselRecognizer(),
        FiPersonalIdentityCodeRecognizer(),
        SePersonnummerRecognizer(),
        InAadhaarRecognizer(),
        InPanRecognizer(),
    ]


# A private key's whole block, not only the header line detect-secrets matches.
_PRIVATE_KEY_BLOCK = re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----.*?(?:-----END[A-Z0-9 ]*-----|\Z)", re.S)

# Credentials detect-secrets has no plugin for. Each is found whole (group 1 is the secret when the
# pattern has a group: `Bearer` stays, the token goes).
_OWN_SECRET_PATTERNS = (
    # An HTTP bearer credential (`Authorization: Bearer ...`, a curl line): a token of 8 or more
    # characters of RFC 6750's token68 holding a digit or a sign, so "the bearer bonds" is prose.
    re.compile(r"\bbearer[ \t]+((?=[A-Za-z0-9._~+/-]*[0-9._~+/-])[A-Za-z0-9._~+/-]{8,}=*)", re.I),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),  # Google API key
    re.compile(r"\bsk-ant-[a-z0-9]+-[A-Za-z0-9_-]{20,}"),  # Anthropic API key
    re.compile(r"\bhf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])"),  # Hugging Face access token
)


def _secret_detector() -> Detector:
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
    from detect_secrets.plugins.ip_public import IPPublicDetector
    from detect_secrets.plugins.keyword import (
        FOLLOWED_BY_EQUAL_SIGNS_REGEX,
        QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
        KeywordDetector,
    )
    from detect_secrets.plugins.private_key import PrivateKeyDetector

    def subclasses(cls: type) -> list[type]:
        found: list[type] = []
        sub: type
        for sub in cls.__subclasses__():
            found.append(sub)
            found.extend(subclasses(sub))
        return found

    _import_plugin_modules()
    skipped = (HighEntropyStringsPlugin, IPPublicDetector, PrivateKeyDetector, KeywordDetector)
    regex_plugins: list[Any] = [
        plugin()
        for plugin in subclasses(RegexBasedDetector)
        if not issubclass(plugin, skipped) and not getattr(plugin, "__abstractmethods__", None)
    ]
    keyword = KeywordDetector()
    # `password=hunter2` (unquoted, as in a URL or a config line) and every quoted form
    # (`password: "..."`, `token = '...'`); not `password: ...` unquoted, which prose is full of.
    assignments = {FOLLOWED_BY_EQUAL_SIGNS_REGEX: 5, **QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP}

    # Each pattern with the literal strings it cannot match without (memoryapp.screening.literals):
    # a text holding none of them is not searched by it. Most are a token's prefix (`ghp_`,
    # `AKIA`, `xoxb-`, `eyJ`), so an ordinary turn that passed `_may_hold_secret` (an e-mail
    # address or a URL is a long word that is not all letters) runs a few of the 50 patterns.
    # The whole match of detect-secrets' patterns (their groups are parts of the token: `ghp` of
    # `ghp_...`); group 1 of ours where it has one.
    patterns = [(regex, literal_gate(regex), 0) for plugin in regex_plugins for regex in plugin.denylist]
    patterns += [(regex, literal_gate(regex), min(regex.groups, 1)) for regex in _OWN_SECRET_PATTERNS]
    # The patterns by gate (several share one: `key`, `pass`, `pw`, `token`), each gate asked once a
    # text. And the gates whose every string is rare in prose (`_RARE_LITERAL` characters or more:
    # `ghp_`, `xoxb-`, `eyJ`; not `.`, `:`, `AP`, nor AWS's `3T`) in two groups by case, each group's
    # strings as one alternation searched once a text (`_any_of`): a text holding none of a group's
    # strings passes none of its gates, so none of them is asked and none of their patterns tried
    # (some 40 gates asked one by one before: 10 us a turn holding an e-mail address, whose long
    # word sends it here). A text holding one asks the group's gates one by one as before.
    by_gate: dict[Any, list[tuple[Any, int]]] = {}
    for regex, gate, group in patterns:
        by_gate.setdefault(gate, []).append((regex, group))
    groups: dict[str, list[tuple[Any, list[tuple[Any, int]]]]] = {"common": [], "case": [], "nocase": []}
    for gate, gated in by_gate.items():
        rare = gate is not None and min(map(len, gate.strings)) >= _RARE_LITERAL
        groups[("nocase" if gate.ignore_case else "case") if rare else "common"].append((gate, gated))
    in_case = _any_of(s for gate, _ in groups["case"] for s in gate.strings)
    in_nocase = _any_of(s for gate, _ in groups["nocase"] for s in gate.strings)

    def detect(text: str, parsed: Parsed | None = None) -> list[tuple[int, int]]:
        lowered = text.lower() if text.isascii() else None
        asked = groups["common"]
        if in_case is not None and in_case.search(text) is not None:
            asked = asked + groups["case"]
        # A case-insensitive gate lets a text that is not ASCII through (`LiteralGate.may_match`).
        if in_nocase is not None and (lowered is None or in_nocase.search(lowered) is not None):
            asked = asked + groups["nocase"]
        spans = [
            match.span(group)
            for gate, gated in asked
            if gate is None or gate.may_match(text, lowered)
            for regex, group in gated
            for match in regex.finditer(text)
        ]
        # `password=...` in any of the forms detect-secrets knows; an unquoted value ends at a space.
        # Each of its regexes holds one of its keywords: without one, none of them can match.
        if _secret_keywords().search(lowered if lowered is not None else text.lower()):
            for secret in keyword.analyze_string(text, denylist_regex_to_group=assignments):
                value = secret.split(maxsplit=1)[0] if secret.strip() else ""
                spans.extend(_occurrences(text, value))
        if "PRIVATE KEY" in text or "PuTTY-User-Key-File" in text:
            spans.extend(m.span() for m in _PRIVATE_KEY_BLOCK.finditer(text))
            at = text.find("PuTTY-User-Key-File")
            if at >= 0:
                spans.append((at, len(text)))
        return spans

    return detect


# The fewest characters of every literal string of a secret pattern's gate for the pattern to be
# grouped with the rare ones (`_secret_detector`).
_RARE_LITERAL = 3


def _any_of(strings: Iterable[str]) -> re.Pattern[str] | None:
    """One pattern matching wherever any of the strings is (longest first); None for none."""
    ordered = sorted(set(strings), key=lambda string: (-len(string), string))
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


def _import_plugin_modules() -> None:
    """detect-secrets finds its plugins by importing their modules: import each once."""
    import importlib
    import pkgutil

    import detect_secrets.plugins as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def _occurrences(text: str, found: str) -> list[tuple[int, int]]:
    if not found:
        return []
    spans = []
    at = text.find(found)
    while at >= 0:
        spans.append((at, at + len(found)))
        at = text.find(found, at + len(found))
    return spans


# The words (runs without whitespace, `str.split`'s) holding an `@` or one of its compatibility forms
# (U+FF20, U+FE6B: a reading folds them to `@`, `text_readings`), where every e-mail address is: Presidio's
# e-mail pattern matches no whitespace (its classes are `\w`, `@`, `.`, `-` and ASCII punctuation),
# and its `\b` reads a word's edge as it reads the text's, whitespace being no word character. So its
# matches in a text are its matches in each such word, found where they stand (`_windowed`).
_EMAIL_WINDOW = re.compile("(?<!\\S)\\S*[@\uff20\ufe6b]\\S*")


def _email_windows(text: str) -> Iterable[tuple[int, int]]:
    return (match.span() for match in _EMAIL_WINDOW.finditer(text))


# None: the e-mail detector reads the whole text (tests/screening/test_gates.py compares the two).
_EMAIL_WINDOWS: Callable[[str], Iterable[tuple[int, int]]] | None = _email_windows


def _windowed(detect: Detector, windows: Callable[[str], Iterable[tuple[int, int]]], name: str) -> Detector:
    """`detect` run on each window of a text (`windows`: spans no match of `detect` crosses, whose
    edges it reads as it reads the text's), its spans given back over the text. A window's spans
    depend on the window alone, so a write keeps them in its `parsed` by the window's text: the same
    address in several turns of a batch is searched for once."""

    def run(text: str, parsed: Parsed | None = None) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        for start, end in windows(text):
            piece = text[start:end]
            found: list[tuple[int, int]] | None = None
            if parsed is None:
                found = detect(piece, None)
            else:
                key = ("window", name, piece)
                found = parsed.get(key)
                if found is None:
                    found = parsed[key] = detect(piece, parsed)
            spans.extend((start + s, start + e) for s, e in found)
        return spans

    return run


@functools.cache
def detector(category: str) -> Detector:
    """The detector of one category (built on first use). `person` is not here: it needs the
    agent's registry (memoryapp.screening.identifiers)."""
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
    )

    if category == EMAIL:
        email = _presidio([_offline_email_recognizer()])
        return email if _EMAIL_WINDOWS is None else _windowed(email, _EMAIL_WINDOWS, "email")
    if category == PHONE:
        return _phones(PhoneRecognizer(supported_regions=PHONE_REGIONS))
    if category == PAYMENT_CARD:
        return _presidio([CreditCardRecognizer()])
    if category == IBAN:
        return _presidio([IbanRecognizer()])
    if category == IP_ADDRESS:
        return _presidio([IpRecognizer()])
    if category == NATIONAL_ID:
        return _presidio(_national_id_recognizers())
    if category == SECRET:
        return _secret_detector()
    raise ValueError(f"no detector for {category}")


def screening_warm_up() -> None:
    """Build every category's detector now (Presidio's import pulls in its NLP engines' modules:
    18-60 s and ~380 MB on this machine), so no write pays it: called by the gunicorn master and a
    Celery worker's parent before they fork (memory_project.gunicorn_config, memory_project.celery),
    so their children share one copy."""
    for category in CATEGORIES:
        if category != PERSON:
            detector(category)
    _foldable()
    # What the detectors load on their first match, loaded now too: tldextract's suffix trie (the
    # e-mail recogniser's domain check: a third of a second) and phonenumbers' metadata of every
    # region (read region by region as numbers of each turn up: 70 ms for all of them).
    from phonenumbers.phonemetadata import PhoneMetadata
    from phonenumbers.phonenumberutil import COUNTRY_CODES_FOR_NON_GEO_REGIONS, SUPPORTED_REGIONS

    for region in SUPPORTED_REGIONS:
        PhoneMetadata.metadata_for_region(region)
    for code in COUNTRY_CODES_FOR_NON_GEO_REGIONS:
        PhoneMetadata.metadata_for_nongeo_region(code)
    _phone_run()
    detector(EMAIL)("warm@example.org")
    detector(PHONE)("+1 202 555 0143, +44 20 7946 0958")


# What a text must hold for a category's detector to find anything there, checked first with str
# methods that run in C: the ordinary turn holds none of it and costs a few microseconds, where the
# detectors take tens to hundreds (bench/screening.py).
_DIGIT = re.compile(r"[0-9]")
_DIGIT_DOT_DIGIT = re.compile(r"[0-9]\.[0-9]")
# Around a word, what is punctuation of the sentence rather than of a token.
_SENTENCE_PUNCTUATION = ".,;!?()[]{}\"'`"


def _digits(text: str) -> int:
    if text.isascii():  # its only digits (`\\d`) are 0-9: its runs' lengths, kept for the detectors
        return sum(map(len, _digit_runs(text)))
    return len(_DIGIT.findall(text))


# What the checks and detectors of one text ask of it again and again (its words, its runs of digits),
# worked out once a text: the text screened last and its answer, by identity (a write screens its
# texts one by one, every category of one before the next; a thread screening another text at the
# same time only makes the next ask work it out again).
_last_words: tuple[str, list[str]] = ("", [])
_last_digit_runs: tuple[str, list[str]] = ("", [])


def _words(text: str) -> list[str]:
    """`text.split()`, worked out once for the text screened last."""
    global _last_words
    known = _last_words
    if known[0] is text:
        return known[1]
    words = text.split()
    _last_words = (text, words)
    return words


def _digit_runs(text: str) -> list[str]:
    """The text's runs of digits (`\\d+`), worked out once for the text screened last."""
    global _last_digit_runs
    known = _last_digit_runs
    if known[0] is text:
        return known[1]
    runs = _DIGIT_RUN.findall(text)
    _last_digit_runs = (text, runs)
    return runs


@functools.cache
def _secret_keywords() -> re.Pattern[str]:
    """Any of detect-secrets' keywords (`password`, `api_key`, `secret`, ...), lower-case: every
    regex of its keyword detector holds one (matched case-insensitively there, on the lowered text
    here: a case-sensitive search is some eight times faster)."""
    from detect_secrets.plugins.keyword import DENYLIST

    return re.compile("|".join(f"(?:{keyword})" for keyword in DENYLIST))


# Strings one of which every keyword of detect-secrets' keyword detector holds in each of its
# spellings (`api_key`, `apikey`, `db_pass`, `password`, `contraseña`...), checked in `_keyword_parts`.
_KEYWORD_PARTS = ("key", "pass", "pwd", "secret", "contrase")


@functools.cache
def _keyword_parts() -> tuple[str, ...] | None:
    """`_KEYWORD_PARTS` when every spelling of every keyword of detect-secrets holds one of them
    (checked against its list as installed), so a text holding none of them holds no keyword and
    its regex need not run; None when a keyword is not a plain word with optional letters (`x?`)
    or has a spelling holding none (then the regex always runs)."""
    from detect_secrets.plugins.keyword import DENYLIST

    for keyword in DENYLIST:
        spellings = _spellings(keyword)
        if spellings is None or not all(any(part in spelling for part in _KEYWORD_PARTS) for spelling in spellings):
            return None
    return _KEYWORD_PARTS


def _spellings(pattern: str) -> list[str] | None:
    """Every string a pattern of word characters, each optionally followed by `?`, matches; None
    for a pattern holding anything else."""
    spellings = [""]
    at = 0
    while at < len(pattern):
        char = pattern[at]
        if not (char.isalnum() or char == "_"):
            return None
        optional = pattern[at + 1 : at + 2] == "?"
        spellings = [s + char for s in spellings] + (spellings if optional else [])
        at += 2 if optional else 1
    return spellings


def _longest_word(text: str) -> int:
    """The length of the text's longest run of non-whitespace (`str.split`'s words)."""
    return max(map(len, _words(text)), default=0)


def _may_hold_secret(text: str, longest: int | None = None) -> bool:
    """Every token detect-secrets' regex plugins look for is a word of 11 or more characters (the
    shortest, Artifactory's, has 11) that is not all letters; the assignment forms
    (`password=...`, `token: '...'`) need one of the keyword detector's keywords, and private keys
    their header. (A colon and a quote alone, as in most prose, used to run the keyword detector.)
    `longest`: the text's `_longest_word` when the caller has it (then a text whose every word is
    shorter than 11 is not split again)."""
    if "PRIVATE KEY" in text or "PuTTY" in text:
        return True
    lowered = text.lower()
    if "bearer" in lowered:  # a bearer token may be shorter than 11 characters
        return True
    parts = _keyword_parts()
    # A few substring tests (a plain loop: a generator costs more than they do) before the keywords'
    # regex: 0.4 against 1.4 us a turn.
    keyword = parts is None
    for part in parts or ():
        if part in lowered:
            keyword = True
            break
    if keyword and _secret_keywords().search(lowered):
        return True
    if longest is not None and longest < 11:
        return False
    for word in _words(text):
        if len(word) >= 11:
            word = word.strip(_SENTENCE_PUNCTUATION)
            if len(word) >= 11 and not word.isalpha():
                return True
    return False


# The format characters of Unicode (category Cf: zero-width space and joiners, the soft hyphen, the
# byte order mark, bidirectional marks, tags), which a reader does not see: typed into a value
# (`jane@exa\u200bmple.com`, a card's digits) they hide it from every pattern while it reads and
# copies as the value.
_INVISIBLE_BMP = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]"
)
_INVISIBLE_ASTRAL = re.compile(
    "[\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f]"
)


def _invisible(char: str) -> bool:
    return _INVISIBLE_BMP.match(char) is not None or _INVISIBLE_ASTRAL.match(char) is not None


_BEYOND_BMP = re.compile("[^\x00-\uffff]")


def _has_invisible(text: str) -> bool:
    """The BMP's ranges, then the others only for a text holding a character beyond the BMP (rare):
    searched for every non-ASCII turn, one class of all of them cost some 60 us in 1,800 characters."""
    if _INVISIBLE_BMP.search(text) is not None:
        return True
    return _BEYOND_BMP.search(text) is not None and _INVISIBLE_ASTRAL.search(text) is not None


# A decimal digit that is not ASCII: a card, an IBAN, an id or a phone number typed in full-width or
# Arabic-Indic digits is the same number, which the patterns (`[0-9]`) and the digit counts missed.
# And any character whose compatibility form (NFKC) is one ASCII character: the full-width forms of
# an East Asian keyboard (U+FF20 the full-width `@`, U+FF0E its `.`, letters), the small forms (U+FE6B
# `@`, U+FE52 `.`, U+FE62 `+`), mathematical and circled letters and digits, superscripts, the no-break and
# ideographic spaces: an e-mail address, a phone number or an IP address typed so is the same value
# to a reader, which folding only digits and full-width forms left unread. A character whose
# compatibility form is several (U+FB01 `fi`, U+338F `kg`) stays: folding it would move every span after it.


@functools.cache
def _digit_fold() -> dict[int, int]:
    """Each decimal digit of Unicode (category Nd) beyond ASCII, to its ASCII digit, and each character
    whose NFKC form is one ASCII character, to it (one character for one: spans stay the text's;
    built once, before the web and worker processes fork: `screening_warm_up`)."""
    fold: dict[int, int] = {}
    for code in range(0x80, sys.maxunicode + 1):
        char = chr(code)
        if char.isdecimal():
            fold[code] = 0x30 + unicodedata.digit(char)
        elif unicodedata.decomposition(char):
            compatible = unicodedata.normalize("NFKC", char)
            if len(compatible) == 1 and compatible.isascii():
                fold[code] = ord(compatible)
    return fold


@functools.cache
def _foldable() -> frozenset[str]:
    """The characters `_digit_fold` folds. Asked of a text as `not _foldable().isdisjoint(text)`: one
    pass in C, a set lookup a character (47 us for 1,800 characters of Portuguese here, against 128
    for the class of non-ASCII digits and full-width forms searched before, and 619 for one class of
    every range folded)."""
    return frozenset(map(chr, _digit_fold()))


def text_readings(text: str) -> list[tuple[str, list[int] | None]]:
    """How a text is read for values: digits of any script as ASCII digits (full-width, Arabic-Indic,
    Devanagari...: the number every pattern and count reads) and compatibility forms of ASCII
    characters (full-width, small, mathematical...) as those characters (`_digit_fold`), one character for one, so spans stay the text's; and, when it holds invisible characters (`_has_invisible`), also without them, with
    where each of its characters stands in the text (`kept`: a span (s, e) of it is (kept[s],
    kept[e - 1] + 1) of the text). Both are searched: an invisible character inside a value hides it,
    one between two values ("AB123456C\u200b4111...") is the only thing that keeps them apart (a
    pattern's `\b`). An ASCII text is read as it is, once."""
    if text.isascii():
        return [(text, None)]
    text_read = text.translate(_digit_fold()) if not _foldable().isdisjoint(text) else text
    if not _has_invisible(text_read):
        return [(text_read, None)]
    kept = [i for i, char in enumerate(text_read) if not _invisible(char)]
    return [(text_read, None), ("".join(text_read[i] for i in kept), kept)]


def span_back(start: int, end: int, kept: list[int] | None) -> tuple[int, int]:
    """A span of a reading (`text_readings`) over the text as it is (the invisible characters inside it with it)."""
    return (start, end) if kept is None else (kept[start], kept[end - 1] + 1)


def findings(text: str, categories: Iterable[str], memo: Memo | None = None) -> list[Finding]:
    """The spans of `text` in each of `categories` (person aside), in no particular order, over each
    of its readings (`text_readings`), given back over the text as it is."""
    categories = list(categories)
    found = [
        Finding(f.category, *span_back(f.start, f.end, kept))
        for read, kept in text_readings(text)
        for f in _findings(read, categories, memo)
        if f.end > f.start
    ]
    return list(dict.fromkeys(found))


def nothing_possible(text: str, categories: Iterable[str]) -> bool:
    """Whether `findings` answers nothing for an ASCII text (read as it is, once: `text_readings`)
    because no category's check in `_findings` lets it through to a detector: the ordinary turn,
    with or without digits (a time, a price, a date: fewer digits than a card's 12, no phone-shaped
    run, no digit-dot-digit where IP addresses are looked for), told without building the readings,
    findings and lists a screened text costs. The checks that read digits, `@` and colons are
    `_marks_pass`; those of national ids' letters and secrets follow. False for a category it does
    not know (then `findings` decides), and for a text that is not ASCII."""
    if not text.isascii():
        return False
    categories = list(categories)
    if not _KNOWN.issuperset(categories) or _marks_pass(text, categories):
        return False
    longest = -1
    for category in categories:
        if category == NATIONAL_ID:
            if longest < 0:
                longest = _longest_word(text)
            if longest >= 16 and _LONG_ALNUM_RUN.search(text) is not None:
                return False
        elif category == SECRET:
            if longest < 0:
                longest = _longest_word(text)
            if _may_hold_secret(text, longest):
                return False
    return True


def _marks_pass(text: str, categories: Iterable[str]) -> bool:
    """Whether a check of `_findings` that reads an ASCII text's digits, `@` or colons lets it
    through for one of `categories`: a bare text (none of them) skips the five categories of
    `_BARE_SKIPPED`; else a counted category (`_COUNTED`) needs its number of digits, e-mail an `@`,
    phones a phone-shaped run (`phone_possible`, after the digits it needs), IP addresses two colons
    or a digit-dot-digit. (A national id's run of 16 letters and digits and secrets are not read here.)

    The digits are counted on the text's bytes: an ASCII text's only digits (`\\d`) are 0-9, and
    deleting them with `bytes.translate` is some five times faster than searching for one with `\\d`."""
    raw = text.encode("ascii")
    digits = len(raw) - len(raw.translate(None, _ASCII_DIGITS))
    at = b"@" in raw
    colons = raw.count(b":")
    if not digits and not at and colons < 2:
        return False  # bare: the five skipped, no count reached
    for category in categories:
        fewest = _COUNTED.get(category)
        if fewest is not None:
            passes = digits >= fewest
        elif category == EMAIL:
            passes = at
        elif category == PHONE:
            passes = digits >= _phone_fewest() and phone_possible(text)
        elif category == IP_ADDRESS:
            passes = colons >= 2 or (digits >= 2 and _DIGIT_DOT_DIGIT.search(text) is not None)
        else:
            continue  # secrets and national ids' letters: read by `nothing_possible`
        if passes:
            return True
    return False


def nothing_possible_many(joined: JoinedTexts, categories: Iterable[str]) -> list[bool]:
    """`nothing_possible` of each text of a write, worked out at once over its texts joined
    (memoryapp.screening.batch): True only where `nothing_possible` says True; False for a text it is
    to read alone (not ASCII, or one where a test below finds what one of its checks looks for):

    1. For secrets, the strings `_may_hold_secret` looks for, lower-cased: the keywords' parts
       (the keywords' regex when they have none), `bearer`, a private key's header, PuTTY's.
    2. A digit, an `@` (a `#` of the joined text's classes) or two colons: `_marks_pass` of that text
       alone (its digits counted against the enabled categories' needs, its `@`, colons and runs).
    3. A word of 11 characters or more (a run of 11 `x` or more of the words' classes), where its
       national id check (16 letters and digits in a row) and its secret check (a word of 11,
       punctuation around it aside, that is not all letters) look: each such word of a text nothing
       above flagged is read alone (`_long_word_quiet`; `vegetarian,` is such a word, and no secret's).
    """
    categories = list(categories)
    if not _KNOWN.issuperset(categories):
        return [False] * joined.count  # a category it does not know: `nothing_possible` says False
    looked_for = set(categories)
    flagged: list[int] = []
    if SECRET in looked_for:
        parts = _keyword_parts()
        if parts is None:
            flagged += joined.matching(_secret_keywords())
        # A private key's header holds `key`, one of the parts: not looked for again (3 us a batch).
        key_header = () if parts is not None and "key" in parts else ("private key",)
        for needle in (*(parts or ()), "bearer", *key_header, "putty"):
            flagged += joined.holding(needle)
    answer = joined.let_go(flagged)
    # The texts holding a digit or an `@`, and those holding two colons (counted by `map` in C).
    marked = set(joined.holding(b"#", joined.classes()))
    marked.update(k for k, many in enumerate(map(str.count, joined.texts, _COLONS)) if many >= 2)
    for k in marked:
        at = joined.joined[k]
        if answer[at] and _marks_pass(joined.texts[k], categories):
            answer[at] = False
    national, secret = NATIONAL_ID in looked_for, SECRET in looked_for
    if national or secret:
        for k, word in joined.long_words():
            at = joined.joined[k]
            if answer[at] and not _long_word_quiet(word, national=national, secret=secret):
                answer[at] = False
    return answer


def _long_word_quiet(word: str, *, national: bool, secret: bool) -> bool:
    """Whether a word of 11 characters or more (lower-cased) of a text that passed every other test
    above (an ASCII text whose digits, `@` and colons pass no check, with no secret keyword, `bearer`
    or key header) leaves `nothing_possible` True: what is left of its checks reads only such words, each alone.
    National ids: a run of 16 letters and digits (within one word); secrets: a word of 11, sentence
    punctuation around it aside, that is not all letters (`_may_hold_secret`). The words are found
    over the batch's texts at once (`JoinedTexts.long_words`): some 0.5 us a word, where splitting
    each text holding one cost 2 us a text, and `nothing_possible` itself 6."""
    if national and len(word) >= 16 and _LONG_ALNUM_RUN.search(word) is not None:
        return False
    if secret:
        stripped = word.strip(_SENTENCE_PUNCTUATION)
        if len(stripped) >= 11 and not stripped.isalpha():
            return False
    return True


def _findings(text: str, categories: Iterable[str], memo: Memo | None) -> list[Finding]:
    found: list[Finding] = []
    digits = -1
    bare: bool | None = None
    longest = -1  # `_longest_word`, once asked
    for category in categories:
        if category in _BARE_SKIPPED:
            # One test for six categories' checks: the ordinary turn has no digit, `@` or `::`.
            if bare is None:
                bare = "@" not in text and text.count(":") < 2 and _ANY_DIGIT.search(text) is None
            if bare:
                continue
        if category in _COUNTED:
            if digits < 0:
                # A bare text has no digit of any script (`\d`), so none of `[0-9]`.
                digits = 0 if bare else _digits(text)
            possible = digits >= _COUNTED[category]
            if not possible and category == NATIONAL_ID:
                # A run of 16 letters and digits is within one word (no whitespace is a letter or a
                # digit): a text whose words are all shorter is not searched (0.6 against 5 us).
                if longest < 0:
                    longest = _longest_word(text)
                possible = longest >= 16 and _LONG_ALNUM_RUN.search(text) is not None
        elif category == SECRET:
            if longest < 0:
                longest = _longest_word(text)
            possible = _may_hold_secret(text, longest)
        else:
            possible = _POSSIBLE[category](text)
        if not possible:
            continue
        found.extend(Finding(category, start, end) for start, end in detected(category, text, memo))
    return found


class Memo:
    """What one write's detectors found and worked out. Kept by the write's screener only, so no
    text outlives its write in memory.

    - `found`: the spans of each (category, text): a write screens each text for its categories and
      again for registered people's e-mails and phones (memoryapp.screening.identifiers), which ran
      the same detector over the same text twice.
    - `parsed`: the detectors' verdicts on pieces of text (`Parsed`): a phone number or an e-mail
      address in several turns of a batch is parsed and validated once.
    - `gated`: whether a text may name one of the agent's registered people, by the matcher that
      asked (memoryapp.screening.people): screening's `person` category and the subject index
      (memoryapp.subjects.detect `rows_named`) ask it of the same texts in one write.
    - `let_go`: the texts a matcher's gate let go, told of a whole batch at once (`lets_go`), by
      the matcher's number: the subject index reads the batch's turns after screening did.
    """

    __slots__ = ("found", "gated", "let_go", "parsed")

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self.parsed: Parsed = {}
        self.gated: dict[tuple[int, str], bool] = {}
        self.let_go: dict[int, set[str]] = {}


def detected(category: str, text: str, memo: Memo | None = None) -> list[tuple[int, int]]:
    """`detector(category)(text)`, read from `memo` when this write ran it on that text already."""
    if memo is None:
        return detector(category)(text)
    spans = memo.found.get((category, text))
    if spans is None:
        spans = memo.found[(category, text)] = detector(category)(text, memo.parsed)
    return spans


# The categories none of which a text without a digit (of any script), an `@` and two colons can
# hold, as their own checks below say: cards and IBANs need ASCII digits (`_COUNTED`), a phone a run
# of digits (`phone_possible`), an e-mail its `@`, an IP address a digit or two colons.
_BARE_SKIPPED = frozenset({PAYMENT_CARD, IBAN, EMAIL, PHONE, IP_ADDRESS})
_ANY_DIGIT = re.compile(r"\d")
_ASCII_DIGITS = b"0123456789"
_COLONS = itertools.repeat(":")
# The categories whose every match holds at least this many digits. National ids: every one of
# them holds four, but for an Italian fiscal code, whose seven digits may each be written as a
# letter (omocodia: `RSSMRAURTMLARSNL` validates): 16 letters and digits in a row, which a text
# with fewer digits is searched for (`_LONG_ALNUM_RUN`; a letter `[A-Z]` matches case-insensitively
# is a letter of some case, so alphanumeric).
_COUNTED = {PAYMENT_CARD: 12, IBAN: 8, NATIONAL_ID: 4}
_LONG_ALNUM_RUN = re.compile(r"[^\W_]{16}")
# The others' checks.
_POSSIBLE: dict[str, Callable[[str], bool]] = {
    PHONE: phone_possible,
    EMAIL: lambda text: "@" in text,
    # IPv6 forms (the IPv4-mapped and embedded ones among them) hold two colons at least; an IPv4
    # address a digit, a dot and a digit (`[0-9]`: Presidio's patterns are ASCII digits).
    IP_ADDRESS: lambda text: text.count(":") >= 2 or _DIGIT_DOT_DIGIT.search(text) is not None,
    SECRET: _may_hold_secret,
}
# The categories `nothing_possible` knows every check of.
_KNOWN = frozenset(_COUNTED) | frozenset(_POSSIBLE)
