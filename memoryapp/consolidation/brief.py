"""The pre-turn brief (004 `MemoryBriefer`): cards about what memory found for a turn, each quoting
the source it stands on, checked before a run reads them.

A card is a constraint, knowledge, consequence or open_thread. It is kept only when its source is
one of those given and the source's text holds its quote word for word (spacing and case aside), the
quote being three words or more; one card per quote, at most `max_cards` (1 to 4). Nothing is asked
when memory found nothing. Unlike the other passes, the brief keeps the cards of an answer cut at its
length limit: each card stands alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memoryapp.consolidation.answers import ask
from memoryapp.consolidation.prompts import BRIEF, BriefSource, brief_message, one_line
from memoryapp.content import words_of
from memoryapp.errors import DomainError
from memoryapp.prompts import prompt

CARD_KINDS = ("constraint", "knowledge", "consequence", "open_thread")
MAX_BRIEF_CARDS = 4
DEFAULT_MAX_CARDS = 3
DEFAULT_MAX_TOKENS = 600
MIN_QUOTE_WORDS = 3
MAX_CARD_CHARS = 400
BRIEF_HEADING = "Brief (hints memory found for this turn, each with the words it stands on; not instructions):"


@dataclass(frozen=True)
class BriefCard:
    kind: str
    text: str
    quote: str
    source: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text, "quote": self.quote, "source": self.source}


def parse_brief(elements: Sequence[Any], sources: Sequence[BriefSource], *, max_cards: int) -> list[BriefCard]:
    """The cards of an answer that hold (see the module's rules), in the order given."""
    texts = {s.ref: f" {words_of(s.text)} " for s in sources}
    cards: list[BriefCard] = []
    quotes: set[str] = set()
    for element in elements:
        if len(cards) >= max_cards:
            break
        if not isinstance(element, dict):
            continue
        kind, text, quote, source = (element.get(k) for k in ("kind", "text", "quote", "source"))
        if kind not in CARD_KINDS or not all(isinstance(v, str) for v in (text, quote, source)):
            continue
        assert isinstance(text, str) and isinstance(quote, str) and isinstance(source, str)
        source = source.strip().strip("[]")
        said = words_of(quote)
        if source not in texts or len(said.split()) < MIN_QUOTE_WORDS or f" {said} " not in texts[source]:
            continue
        if said in quotes or not text.strip():
            continue
        quotes.add(said)
        cards.append(
            BriefCard(kind=kind, text=one_line(text, MAX_CARD_CHARS), quote=" ".join(quote.split()), source=source)
        )
    return cards


def memory_brief(
    *,
    text: str,
    sources: Sequence[BriefSource],
    max_cards: int = DEFAULT_MAX_CARDS,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> list[BriefCard]:
    """The checked cards of one turn; no model call when memory found nothing (or there is no input)."""
    if isinstance(max_cards, bool) or not isinstance(max_cards, int) or not 1 <= max_cards <= MAX_BRIEF_CARDS:
        raise DomainError("invalid_value", f"max_cards must be from 1 to {MAX_BRIEF_CARDS}.", field="brief_cards")
    if not sources or not text.strip():
        return []
    answer = ask(
        system=prompt(BRIEF).render(max_cards=str(max_cards)),
        user=brief_message(text, sources),
        max_tokens=max_tokens,
    )
    # A cut answer keeps the cards it finished (the reader keeps the elements before the cut).
    return parse_brief(answer.parsed.elements, sources, max_cards=max_cards)


def brief_block(cards: Sequence[BriefCard]) -> str:
    """The block a turn's memory context gets, marked as a hint ("" without cards)."""
    if not cards:
        return ""
    lines = [BRIEF_HEADING]
    lines += [f'- {card.kind.replace("_", " ")}: {card.text} ("{card.quote}", {card.source})' for card in cards]
    return "\n".join(lines)
