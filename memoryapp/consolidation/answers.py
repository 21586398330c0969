"""Reading a consolidation answer: a JSON array, whole, or nothing.

Consolidation makes its decisions as a set (004): an answer the model did not finish (cut at its
length limit, or with no closed array) is not used at all, and the work it was for is left for a
later pass. The brief is the exception: it keeps the cards of a cut answer (see `brief`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memoryapp.llm.arrays import ParsedArray, parse_json_array
from memoryapp.llm.model import Completion
from memoryapp.llm.port import complete


@dataclass
class Answer:
    completion: Completion
    parsed: ParsedArray

    @property
    def whole(self) -> list[Any] | None:
        """The elements of a finished array; None when the answer was unfinished or held none."""
        if not self.parsed.found or not self.parsed.complete:
            return None
        return list(self.parsed.elements)


def ask(*, system: str, user: str, max_tokens: int) -> Answer:
    """One call to the language model (its usage recorded on the current job run)."""
    completion = complete(system=system, messages=[{"role": "user", "content": user}], max_tokens=max_tokens)
    return Answer(completion=completion, parsed=parse_json_array(completion.text))
