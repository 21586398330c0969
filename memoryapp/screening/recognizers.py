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
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

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


Detector = Callable[[str], list[tuple[int, int]]]


def _presidio(recognizers: Iterable[object], *, min_score: float = MIN_SCORE) -> Detector:
    built = list(recognizers)

    def detect(text: str) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        for recognizer in built:
            for result in recognizer.analyze(text, recognizer.supported_entities, None):  # type: ignore[attr-defined]
                if result.score >= min_score:
                    spans.append((result.start, result.end))
        return spans

    return detect


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

    patterns = [regex for plugin in regex_plugins for regex in plugin.denylist]

    def detect(text: str) -> list[tuple[int, int]]:
        # The whole match of each pattern (its groups are parts of the token: `ghp` of `ghp_...`).
        spans = [match.span() for regex in patterns for match in regex.finditer(text)]
        # `password=...` in any of the forms detect-secrets knows; an unquoted value ends at a space.
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
        return _presidio([_offline_email_recognizer()])
    if category == PHONE:
        return _presidio([PhoneRecognizer(supported_regions=PHONE_REGIONS)])
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


# What a text must hold for a category's detector to find anything there, checked first with str
# methods that run in C: the ordinary turn holds none of it and costs a few microseconds, where the
# detectors take tens to hundreds (bench/screening.py).
_DIGIT = re.compile(r"[0-9]")
# Around a word, what is punctuation of the sentence rather than of a token.
_SENTENCE_PUNCTUATION = ".,;!?()[]{}\"'`"


def _digits(text: str) -> int:
    return len(_DIGIT.findall(text))


@functools.cache
def _secret_keywords() -> re.Pattern[str]:
    """Any of detect-secrets' keywords (`password`, `api_key`, `secret`, ...), lower-case: every
    regex of its keyword detector holds one (matched case-insensitively there, on the lowered text
    here: a case-sensitive search is some eight times faster)."""
    from detect_secrets.plugins.keyword import DENYLIST

    return re.compile("|".join(f"(?:{keyword})" for keyword in DENYLIST))


def _may_hold_secret(text: str) -> bool:
    """Every token detect-secrets' regex plugins look for is a word of 11 or more characters (the
    shortest, Artifactory's, has 11) that is not all letters; the assignment forms
    (`password=...`, `token: '...'`) need one of the keyword detector's keywords, and private keys
    their header. (A colon and a quote alone, as in most prose, used to run the keyword detector.)"""
    if "PRIVATE KEY" in text or "PuTTY" in text:
        return True
    if _secret_keywords().search(text.lower()):
        return True
    for word in text.split():
        if len(word) >= 11:
            word = word.strip(_SENTENCE_PUNCTUATION)
            if len(word) >= 11 and not word.isalpha():
                return True
    return False


def findings(text: str, categories: Iterable[str], memo: Memo | None = None) -> list[Finding]:
    """The spans of `text` in each of `categories` (person aside), in no particular order."""
    found: list[Finding] = []
    digits = -1
    for category in categories:
        if category in _COUNTED:
            if digits < 0:
                digits = _digits(text)
            possible = digits >= _COUNTED[category]
        else:
            possible = _POSSIBLE[category](text)
        if not possible:
            continue
        found.extend(Finding(category, start, end) for start, end in detected(category, text, memo))
    return found


# What one write's detectors found, by (category, text): a write screens each text for its
# categories and again for registered people's e-mails and phones (memoryapp.screening.identifiers),
# which ran the same detector over the same text twice. Kept by the write's screener only, so no
# text outlives its write in memory.
Memo = dict[tuple[str, str], list[tuple[int, int]]]


def detected(category: str, text: str, memo: Memo | None = None) -> list[tuple[int, int]]:
    """`detector(category)(text)`, read from `memo` when this write ran it on that text already."""
    if memo is None:
        return detector(category)(text)
    spans = memo.get((category, text))
    if spans is None:
        spans = memo[(category, text)] = detector(category)(text)
    return spans


# The categories whose every match holds at least this many digits.
_COUNTED = {PHONE: 7, PAYMENT_CARD: 12, IBAN: 8, NATIONAL_ID: 4}
# The others' checks.
_POSSIBLE: dict[str, Callable[[str], bool]] = {
    EMAIL: lambda text: "@" in text,
    IP_ADDRESS: lambda text: text.count(":") >= 2 or ("." in text and _digits(text) >= 4),
    SECRET: _may_hold_secret,
}
