"""Reading a search text without a model: its words, its names, and the kind of question.

The keyword channel searches the words that carry meaning: question words ("what", "when"),
stop words and chat filler are left out, since Postgres would otherwise rank every turn that
says "did" or "you". Names (capitalised words that do not start the sentence, or any
capitalised word that is not a question word) are kept apart: a turn that names the same
person or place is a strong match.

The kind of question (004: temporal, aggregate, update, preference or general) is read from
its wording by the rules of `question_kind`; it sets the weights of the search's channels
(memoryapp.search.channels). Small talk ("thanks!", "how are you?") holds no word to search for
and nothing a memory could answer: `small_talk` says so, and recall does not search it.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

# Words that say what kind of question it is, or that every turn of a chat says.
QUESTION_WORDS = frozenset(
    [
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "did",
        "does",
        "do",
        "is",
        "are",
        "was",
        "were",
        "will",
        "would",
        "could",
        "should",
        "can",
        "may",
        "might",
        "has",
        "have",
        "had",
        "ever",
        "also",
        "tell",
        "remind",
        "know",
        "think",
        "recall",
        "remember",
        "please",
    ]
)
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "i",
        "if",
        "in",
        "into",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "he",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "we",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "with",
        "s",
        "t",
        "don",
        "doesn",
        "didn",
        "isn",
        "wasn",
        "weren",
        "aren",
        "won",
        "wouldn",
        "couldn",
        "shouldn",
        "ve",
        "ll",
        "re",
        "d",
        "m",
        "o",
        "y",
        "get",
        "got",
        "go",
        "going",
        "gone",
        "like",
        "one",
        "ones",
        "thing",
        "things",
        "lot",
        "really",
        "much",
        "many",
        "kind",
        "sort",
        "something",
        "anything",
        "okay",
        "ok",
        "oh",
        "yeah",
        "yes",
        "hey",
        "hi",
        "hello",
        "thanks",
        "thank",
        "sure",
        "well",
    ]
)
# A word: a letter or digit of any script, then letters, digits, apostrophes and hyphens ("Inês",
# "café", "O'Brien", "well-known"). The text is read in Unicode's composed form (NFC), as typed
# accents may come as a letter and a combining mark; Postgres' parser and the blind index
# (governance.crypto.blind) take the same letters as one word.
_WORD = re.compile(r"[^\W_](?:[^\W_]|['\u2019\-])*")


# Words of greetings, thanks and acknowledgements: a turn of these (and stop words) alone is small talk.
SMALL_TALK_WORDS = frozenset(
    [
        "hi",
        "hey",
        "hello",
        "hiya",
        "yo",
        "thanks",
        "thank",
        "thx",
        "ty",
        "cheers",
        "ok",
        "okay",
        "k",
        "kk",
        "cool",
        "great",
        "nice",
        "good",
        "fine",
        "awesome",
        "perfect",
        "sure",
        "yes",
        "yeah",
        "yep",
        "no",
        "nope",
        "lol",
        "haha",
        "hahaha",
        "morning",
        "evening",
        "afternoon",
        "night",
        "bye",
        "goodbye",
        "later",
        "welcome",
        "sorry",
        "please",
        "doing",
        "going",
        "alright",
        "right",
        "got",
        "see",
        "wow",
        "hmm",
        "oh",
        "ah",
        "much",
        "lot",
        "so",
        "very",
        "too",
        "you",
        "it",
        "that",
    ]
)

KIND_TEMPORAL, KIND_AGGREGATE, KIND_UPDATE, KIND_PREFERENCE, KIND_GENERAL = (
    "temporal",
    "aggregate",
    "update",
    "preference",
    "general",
)
# The rules of question_kind, each a pattern over the lower-cased question, tried in this order.
_TEMPORAL = re.compile(
    r"\b(when|what (time|date|day|year|month)|which (year|month|day|date)|how long (ago|before|after|since)"
    r"|how many (days|weeks|months|years|hours)|(days|weeks|months|years) (ago|before|after|later|earlier)"
    r"|first|earliest|last time|most recently|before|after|since|until|during|yesterday|today|tomorrow"
    r"|(last|next|this|past) (week|weekend|month|year|spring|summer|autumn|fall|winter|monday|tuesday"
    r"|wednesday|thursday|friday|saturday|sunday)|in (19|20)\d\d|january|february|march|april|june|july"
    r"|august|september|october|november|december|order of|chronolog)\b"
)
_UPDATE = re.compile(
    r"\b(now|currently|current|latest|still|anymore|any more|these days|at the moment|changed|switched"
    r"|moved to|new|updated?|most recent|nowadays|recently)\b"
)
_AGGREGATE = re.compile(
    r"\b(how many|how much|total|in total|altogether|all( of)? the|list|every|each|both|what (kinds?|types?"
    r"|sorts?) of|what are some|which \w+s\b|what \w+ (activities|hobbies|events|things|places|books|items)"
    r"|activities|hobbies|count|number of|several|various|ways)\b"
)
_PREFERENCE = re.compile(
    r"\b(prefer\w*|favou?rite|like[sd]?|love[sd]?|enjoy\w*|hate[sd]?|dislike[sd]?|recommend\w*|suggest\w*"
    r"|interested|into|fan of|taste|would \w+ (want|like|enjoy)|should i|any (ideas|tips|advice))\b"
)


# Whose turns a question asks about in a conversation of a person with an assistant (turn roles
# `user` and `assistant`): asking what the assistant said ("what did you recommend", "you told me",
# "our previous chat") asks for the assistant's turns; speaking of oneself in the first person ("what
# did I buy", "my sister's birthday") for the person's own. A question about a third party ("What
# did Melanie paint?") asks for neither.
VOICE_USER, VOICE_ASSISTANT = "user", "assistant"
_SAID_PAST = (
    "told|said|mentioned|recommended|suggested|gave|provided|shared|listed|explained|described|wrote|offered"
    "|named|showed|proposed|advised"
)
_SAID_BASE = "tell|say|mention|recommend|suggest|give|provide|share|list|explain|describe|write|offer|name|show"
_ASSISTANT_VOICE = re.compile(
    rf"\byou ({_SAID_PAST})\b|\b(did you|have you|had you|you've|you have|you had) ({_SAID_BASE}|{_SAID_PAST}|given|written|shown)\b"
    r"|\b(our|the|that) (previous|last|earlier|past|other) (conversation|chat|discussion|exchange|session)s?\b"
)
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|im|ive|my|me|mine|myself)\b")


def question_voice(text: str) -> str:
    """Whose turns the question asks about (`VOICE_ASSISTANT`, `VOICE_USER` or ""), by the rules above:
    what the assistant said first, then the first person."""
    lowered = " ".join((text or "").lower().replace("\u2019", "'").split())
    if _ASSISTANT_VOICE.search(lowered):
        return VOICE_ASSISTANT
    if _FIRST_PERSON.search(lowered):
        return VOICE_USER
    return ""


def question_kind(text: str) -> str:
    """The kind of question, by rules over its wording (004): a question naming or asking for a time
    is temporal; one asking how things stand now is an update; one asking for a count or a list is
    an aggregate; one about likes and choices a preference; any other general. The first rule that
    holds decides."""
    lowered = " ".join((text or "").lower().split())
    if _TEMPORAL.search(lowered):
        return KIND_TEMPORAL
    if _UPDATE.search(lowered):
        return KIND_UPDATE
    if _AGGREGATE.search(lowered):
        return KIND_AGGREGATE
    if _PREFERENCE.search(lowered):
        return KIND_PREFERENCE
    return KIND_GENERAL


@dataclass(frozen=True)
class QueryAnalysis:
    text: str
    terms: list[str] = field(default_factory=list)  # lower-cased words that carry meaning, in order
    names: list[str] = field(default_factory=list)  # capitalised names, lower-cased
    kind: str = KIND_GENERAL  # temporal | aggregate | update | preference | general
    small_talk: bool = False  # greetings, thanks, acknowledgements: nothing to search for
    voice: str = ""  # whose turns it asks about: "user" (the asker's own), "assistant" (what it said), ""

    @property
    def searchable(self) -> bool:
        return bool(self.terms)


def is_small_talk(text: str) -> bool:
    """Whether the text is small talk: it has words, and every one is a greeting, thanks, an
    acknowledgement, a question or a stop word (no word names anything memory could hold)."""
    words = [_clean(w) for w in _words(text or "")]
    words = [w for w in words if w]
    if not words or len(words) > 8:
        return False
    return all(w in SMALL_TALK_WORDS or w in STOP_WORDS or w in QUESTION_WORDS for w in words)


def _words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFC", text) if not text.isascii() else text)


def _clean(word: str) -> str:
    word = word.replace("\u2019", "'").strip("'-").lower()
    if word.endswith("'s"):
        word = word[:-2]
    return word


def analyze_query(text: str) -> QueryAnalysis:
    """1. Split into words; 2. drop question and stop words; 3. keep names. Terms keep their
    order and appear once."""
    words = _words(text or "")
    terms: list[str] = []
    names: list[str] = []
    for position, raw in enumerate(words):
        word = _clean(raw)
        if not word:
            continue
        if word in QUESTION_WORDS or word in STOP_WORDS or len(word) < 2:
            continue
        if word not in terms:
            terms.append(word)
        if raw[:1].isupper() and (position > 0 or word not in QUESTION_WORDS) and word not in names:
            names.append(word)
    return QueryAnalysis(
        text=text or "",
        terms=terms,
        names=names,
        kind=question_kind(text),
        small_talk=is_small_talk(text),
        voice=question_voice(text),
    )


_NOT_WORD = re.compile(r"[\W_]+")


def tsquery_terms(analysis: QueryAnalysis) -> list[str]:
    """The terms as safe operands of to_tsquery (letters and digits of any script; hyphenated words
    and apostrophes split, as Postgres' parser splits them)."""
    operands: list[str] = []
    for term in analysis.terms:
        for piece in _NOT_WORD.split(term):
            if piece and piece not in STOP_WORDS and piece not in operands:
                operands.append(piece)
    return operands
