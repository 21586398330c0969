"""The JSON parser of the agent API: it refuses, naming the field, what no later step can keep.

DRF's own parser lets through values that fail far from the request's edge, as 500s or as
errors that name nothing:

- a lone surrogate (`"\\ud800"`): valid JSON, but no UTF-8 text holds it, so the database driver,
  and even the error message echoing it, fail to encode it;
- NUL (`"\\u0000"`): PostgreSQL keeps it neither in text nor in jsonb;
- a number too large for a float (`1e999` is read as infinity, which JSON cannot write back);
- nesting deep enough to exhaust Python's recursion (a RecursionError is not a ValueError);
- a body of any size (DRF reads it whole, past Django's DATA_UPLOAD_MAX_MEMORY_SIZE): 413 past 32 MiB.

Strict JSON refuses raw control characters in strings and raw bytes that are not UTF-8, so a
NUL or a surrogate can only arrive as a `\\u` escape: the parsed value is walked only when the
raw text holds such an escape, and a normal request pays one substring search.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from memoryapp.errors import DomainError
from memoryapp.storable import json_text_may_hold_unstorable, unstorable_text_field

# The largest JSON body of any endpoint: a batch of entries or an import (their views say so
# from Content-Length first). Read with a bound, so a chunked body without one is cut off too.
MAX_JSON_BODY_BYTES = 32 * 1024 * 1024


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class JSONParser(BaseParser):
    """Strict JSON whose every string can be stored (see the module docstring)."""

    media_type = "application/json"
    # The memory tool's views answer a NUL themselves, with the text the model reads.
    refuse_nul = True

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = stream.read(MAX_JSON_BODY_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_JSON_BODY_BYTES:
            raise DomainError(
                "request_too_large", f"A request body holds at most {MAX_JSON_BODY_BYTES} bytes.", status=413
            )
        try:
            text = raw.decode(settings.DEFAULT_CHARSET)
            data = json.loads(text, parse_float=_finite_float, parse_constant=_refuse_constant)
        except RecursionError as exc:
            raise ParseError("JSON parse error - the body is nested too deeply.") from exc
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise ParseError(f"JSON parse error - {exc}") from exc
        if json_text_may_hold_unstorable(text):
            found = unstorable_text_field(data, refuse_nul=self.refuse_nul)
            if found is not None:
                field, reason = found
                raise DomainError("invalid_text", f"{field or 'The body'} {reason}.", field=field or None)
        return data


class ToolInputJSONParser(JSONParser):
    """For the memory tool's inputs: a NUL is left to the tool, which answers it as a tool result."""

    refuse_nul = False
