"""Reading a search text without a model: its words, its names, and the kind of question.

The keyword channel searches the words that carry meaning: question words ("what", "when"),
stop words and chat filler are left out, since Postgres would otherwise rank every turn that
says "did" or "you". Names (capitalised words that do not start the sentence, or any
capitalised word that is not a question word) are kept apart: a turn that names the same
person or place is a strong match.
"""

from __future__ import annotations

import re
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
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")


@dataclass(frozen=True)
class QueryAnalysis:
    text: str
    terms: list[str] = field(default_factory=list)  # lower-cased words that carry meaning, in order
    names: list[str] = field(default_factory=list)  # capitalised names, lower-cased

    @property
    def searchable(self) -> bool:
        return bool(self.terms)


def _clean(word: str) -> str:
    word = word.strip("'-").lower()
    if word.endswith("'s"):
        word = word[:-2]
    return word


def analyze_query(text: str) -> QueryAnalysis:
    """1. Split into words; 2. drop question and stop words; 3. keep names. Terms keep their
    order and appear once."""
    words = _WORD.findall(text or "")
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
    return QueryAnalysis(text=text or "", terms=terms, names=names)


def tsquery_terms(analysis: QueryAnalysis) -> list[str]:
    """The terms as safe operands of to_tsquery (letters, digits; hyphenated words split)."""
    operands: list[str] = []
    for term in analysis.terms:
        for piece in re.split(r"[^a-z0-9]+", term):
            if piece and piece not in STOP_WORDS and piece not in operands:
                operands.append(piece)
    return operands
