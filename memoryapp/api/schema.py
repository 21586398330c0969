"""The OpenAPI schema of the agent API: every operation states its errors in the one error shape.

Each view declares its success responses (output serializers); this schema class adds the
errors every operation of a kind can answer, in `ErrorOut`'s shape, unless the view declared
that status itself (the memory tool's errors also carry `result`):

- 401 and 429 always (a missing, unknown or revoked key; the key's rate limit or heavy-request cap);
- 400 when the operation takes a body or query parameters (validation);
- 404 when its path names an object (missing and another agent's answer alike);
- 409 and 413 when it writes: a request racing another one, a body or a value too large.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse

from memoryapp.api.errors import ErrorOut

WRITES = ("POST", "PUT", "PATCH", "DELETE")
ERRORS = {
    400: "The request is invalid: a field, a query parameter or the body (`error.field` names it).",
    401: "No API key, or an unknown or revoked one.",
    404: "Not found: missing, or another agent's (the same answer).",
    409: "A conflict: the object exists already, or another request changed it at the same time.",
    413: "Too large: the request body, an entry, a batch or a value (`error.code` says which).",
    429: "Too many requests: the key's rate limit, or its cap of concurrent context builds and searches "
    "(`Retry-After` says when to try again).",
}


class AgentApiSchema(AutoSchema):
    # `_get_response_bodies`, not `get_response_serializers`: @extend_schema(responses=...)
    # replaces the latter in a subclass of its own, so the errors would be lost on every view
    # that declares its responses.
    def _get_response_bodies(self, direction: Any = "response") -> Any:
        responses = super()._get_response_bodies(direction)
        for status, text in self._errors().items():
            if str(status) not in responses:
                answer = OpenApiResponse(ErrorOut, description=text)
                responses[str(status)] = self._get_response_for_code(answer, str(status), direction=direction)
        return responses

    def _errors(self) -> dict[int, str]:
        wanted = [401, 429]
        takes_input = self.method in ("POST", "PUT", "PATCH") or bool(self._get_parameters_of_kind("query"))
        if takes_input:
            wanted.append(400)
        if "{" in self.path:
            wanted.append(404)
        if self.method in WRITES:
            wanted += [409, 413]
        return {status: ERRORS[status] for status in sorted(wanted)}

    def _get_parameters_of_kind(self, kind: str) -> list[Any]:
        return [p for p in self._get_parameters() if p.get("in") == kind]


class SummarizeFallbackField(OpenApiSerializerFieldExtension):
    """Compaction's `summarize_fallback`: a boolean, or an object of the summarize options."""

    target_class = "memoryapp.api.compaction.FallbackField"

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        options = auto_schema.resolve_serializer(self.target.options, direction)
        return {
            "oneOf": [{"type": "boolean"}, options.ref],
            "description": "false (never), true (the defaults) or an object of summarize options.",
        }
