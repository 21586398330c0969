"""Reading a JSON array out of a model's answer, and asking until there is one.

Models wrap their JSON in prose, cite message numbers such as "[3]" before it, break single
elements, and get cut at their length limit. The reader keeps what it can:

1. Every "[" is a candidate start; each is read element by element with a JSON decoder.
2. An element that is not JSON is skipped up to the next top-level comma (left out, not fatal).
3. The first candidate holding an object wins; "[3]"-like candidates (no object) are passed over;
   a bare "[]" means "no elements" when nothing better follows.
4. A candidate that runs off the end of the text is `complete=False`: the answer was cut, and
   the elements finished before the cut are kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from memoryapp.llm.model import Completion, LanguageModel, Message, ModelError, Usage
from memoryapp.llm.port import complete

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\r\n"


@dataclass
class ParsedArray:
    found: bool = False
    complete: bool = False
    elements: list[Any] = field(default_factory=list)
    # Elements left out because they were not JSON.
    malformed: int = 0


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    return i


def _skip_element(text: str, i: int) -> int:
    """Index of the next top-level ',' or ']' from i (strings and nesting respected), or len."""
    depth = 0
    in_string = False
    escaped = False
    while i < len(text):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            if depth == 0:
                return i
            depth -= 1
        elif ch == "," and depth == 0:
            return i
        i += 1
    return i


def _read_array(text: str, start: int) -> tuple[ParsedArray, int]:
    """Read the array opening at text[start] == "["; return it and the index after it."""
    parsed = ParsedArray(found=True)
    i = _skip_ws(text, start + 1)
    if i < len(text) and text[i] == "]":
        parsed.complete = True
        return parsed, i + 1
    while i < len(text):
        try:
            value, end = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            end = _skip_element(text, i)
            if end >= len(text):
                return parsed, end  # cut inside an element: keep what finished before it
            parsed.malformed += 1
        else:
            parsed.elements.append(value)
        i = _skip_ws(text, end)
        if i >= len(text):
            return parsed, i
        if text[i] == ",":
            i = _skip_ws(text, i + 1)
            continue
        if text[i] == "]":
            parsed.complete = True
            return parsed, i + 1
        # Junk between elements (a stray word): skip to the next separator.
        i = _skip_element(text, i)
    return parsed, i


def parse_json_array(text: str) -> ParsedArray:
    """The array of the answer (see the module's steps); `found=False` when there is none."""
    empty: ParsedArray | None = None
    cut: ParsedArray | None = None
    i = text.find("[")
    while i != -1:
        parsed, _ = _read_array(text, i)
        if any(isinstance(e, dict) for e in parsed.elements):
            return parsed
        if parsed.complete and not parsed.elements and not parsed.malformed and empty is None:
            empty = parsed
        if not parsed.complete and cut is None and text[_skip_ws(text, i + 1) : _skip_ws(text, i + 1) + 1] == "{":
            cut = parsed
        # A candidate of scalars ("[3]") or a cut one: look further right for the real array.
        i = text.find("[", i + 1)
    if cut is not None:
        return cut
    return empty or ParsedArray()


class NoArrayError(ModelError):
    """The model answered without a JSON array, every try."""


@dataclass
class ArrayAnswer:
    elements: list[Any]
    calls: int = 0
    continuations: int = 0
    malformed: int = 0
    # False when the answer was still cut after the last continuation.
    complete: bool = True
    usages: list[Usage] = field(default_factory=list)


DEFAULT_CONTINUATION = (
    "Your answer was cut off at its length limit. Go on with the JSON array right after the last "
    "complete element shown below, without repeating anything before it. Answer with a JSON array of "
    "the remaining elements only.\n\nLast complete element:\n{last}"
)


def ask_for_array(
    *,
    system: str,
    user: str,
    max_tokens: int,
    timeout: float | None = None,
    tries: int = 3,
    continuations: int = 4,
    continuation_prompt: str = DEFAULT_CONTINUATION,
    record: bool = True,
    model: LanguageModel | None = None,
) -> ArrayAnswer:
    """Ask until the answer holds a JSON array (at most `tries` calls), then continue cut answers.

    1. Ask; no array in the answer -> ask again, up to `tries` calls, then NoArrayError.
    2. An answer cut at its length limit ("length") inside the array keeps its finished elements,
       and the model is asked to go on after the last one, up to `continuations` times.
    """
    messages: list[Message] = [{"role": "user", "content": user}]
    answer = ArrayAnswer(elements=[])
    completion: Completion | None = None
    parsed = ParsedArray()
    for _ in range(tries):
        completion = complete(
            system=system, messages=messages, max_tokens=max_tokens, timeout=timeout, record=record, model=model
        )
        answer.calls += 1
        answer.usages.append(completion.usage)
        parsed = parse_json_array(completion.text)
        if parsed.found:
            break
    if completion is None or not parsed.found:
        raise NoArrayError(f"The model answered without a JSON array {tries} times.")
    answer.elements.extend(parsed.elements)
    answer.malformed += parsed.malformed
    transcript = list(messages)
    while not parsed.complete and completion.finish_reason == "length" and answer.continuations < continuations:
        last = json.dumps(answer.elements[-1], ensure_ascii=False) if answer.elements else "(none yet)"
        transcript = [
            *transcript,
            {"role": "assistant", "content": completion.text},
            {"role": "user", "content": continuation_prompt.replace("{last}", last)},
        ]
        completion = complete(
            system=system, messages=transcript, max_tokens=max_tokens, timeout=timeout, record=record, model=model
        )
        answer.calls += 1
        answer.continuations += 1
        answer.usages.append(completion.usage)
        parsed = parse_json_array(completion.text)
        # A continuation that starts over repeats elements already kept: keep each once.
        answer.elements.extend(e for e in parsed.elements if e not in answer.elements)
        answer.malformed += parsed.malformed
        if not parsed.found:
            break
    answer.complete = parsed.complete
    return answer
