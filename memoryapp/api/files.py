"""The agent API of memory files: the memory tool, lists, history, versions, the working note.

The scope of a request (user_id, project_id, thread_id, and optionally place, read_only,
author) comes from the query string, so the body of POST /memory-tool can be the model's tool
input unchanged. A refused command answers 4xx with the usual error shape AND `result`, the
text the model should read, so a client can pass any answer through as the tool result.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.errors import error_body
from memoryapp.api.parsers import ToolInputJSONParser
from memoryapp.errors import NotFound
from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.paths import MEMORY_ROOT, path_normalize
from memoryapp.files.selectors import file_history, version_content, version_for_agent
from memoryapp.files.services import UNCHECKED, ExpectedSha, files_list, memory_tool_run
from memoryapp.files.working_note import WORKING_NOTE_PATH, working_note_run
from memoryapp.models import Entry, MemoryFileVersion
from memoryapp.models.choices import FileAuthor

_SCOPE_PARAMS = ("user_id", "project_id", "thread_id")
_ACCESS_PARAMS = (*_SCOPE_PARAMS, "place", "read_only", "author")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# An agent may say who wrote a change; "memory" is for the service's own jobs.
_AGENT_AUTHORS = (FileAuthor.MODEL, FileAuthor.USER, FileAuthor.SYSTEM)


SCOPE_PARAMETERS = [
    OpenApiParameter("user_id", str, description="The person the files are about ('' or absent: not limited)."),
    OpenApiParameter("project_id", str, description="The project ('' or absent: not limited)."),
    OpenApiParameter("thread_id", str, description="The thread's external id ('' or absent: not limited)."),
    OpenApiParameter("place", str, description="The entry a change is written after: its branch sees it."),
    OpenApiParameter("read_only", bool, description="Refuse every change (the model only reads)."),
    OpenApiParameter(
        "author", str, enum=list(_AGENT_AUTHORS), description="Who writes: model (default), user, system."
    ),
]


def _scope_value(name: str, value: str) -> str:
    if len(value) > 128 or any(not ch.isprintable() for ch in value):
        raise MemoryFileError("invalid_scope", f"Error: `{name}` must be at most 128 printable characters.", field=name)
    return value


def request_file_access(request: Request, *, extra: tuple[str, ...] = ()) -> FileAccess:
    """The access a request asks for, within its agent; unknown query parameters are refused."""
    agent = request_agent(request)
    params = request.query_params
    for name in params:
        if name not in _ACCESS_PARAMS and name not in extra:
            raise MemoryFileError("unknown_parameter", f"Error: Unknown query parameter `{name}`.", field=name)
    scope = {name: _scope_value(name, params.get(name, "")) for name in _SCOPE_PARAMS}
    read_only = params.get("read_only", "false").lower()
    if read_only not in ("true", "false", "1", "0"):
        raise MemoryFileError("invalid_value", "Error: `read_only` must be true or false.", field="read_only")
    author = params.get("author", FileAuthor.MODEL)
    if author not in _AGENT_AUTHORS:
        raise MemoryFileError(
            "invalid_value", f"Error: `author` must be one of: {', '.join(_AGENT_AUTHORS)}.", field="author"
        )
    place = None
    if params.get("place"):
        # The place must be an entry of this agent (and of the request's thread, when one is named).
        place = Entry.objects.filter(agent=agent, pk=params["place"]).select_related("thread").first()
        if place is None or (scope["thread_id"] and place.thread.external_id != scope["thread_id"]):
            raise NotFound("The place entry", field="place")
    return FileAccess(
        agent=agent,
        read_only=read_only in ("true", "1"),
        author=author,
        place=place,
        actor=f"agent:{agent.slug}",
        user_id=scope["user_id"],
        project_id=scope["project_id"],
        thread_id=scope["thread_id"],
    )


def tool_error_response(error: MemoryFileError, **more: Any) -> Response:
    return Response(
        {**error_body(error.code, error.message, error.field), "result": error.message, **more}, error.status
    )


def _expected_sha256(value: Any) -> ExpectedSha:
    if value is None:
        return UNCHECKED
    if not isinstance(value, str) or not _SHA256.match(value):
        raise MemoryFileError(
            "invalid_value",
            "Error: `expected_sha256` must be the 64 lowercase hex digits of the sha256 you last read.",
            field="expected_sha256",
        )
    return value


def _scope_of(version: MemoryFileVersion) -> dict[str, str]:
    return {"user_id": version.user_id, "project_id": version.project_id, "thread_id": version.thread_id}


def version_summary(version: MemoryFileVersion) -> dict[str, Any]:
    return {
        "version_id": version.pk,
        "path": version.path,
        "version": version.sequence,
        "sha256": version.sha256,
        "size": version.size,
        # A deletion has no content, so no sha256 (an empty file has the sha256 of "").
        "deleted": version.sha256 == "",
        "renamed_from": version.renamed_from or None,
        "previous_id": version.previous_id,
        "author": version.author,
        "place": version.place_id,
        "scope": _scope_of(version),
        "created_at": version.created_at,
        "redacted": version.redacted_at is not None,
    }


class MemoryToolView(APIView):
    """POST the model's memory tool input ({"command": "view", "path": "/memories"}), get `result`."""

    # A NUL in the tool's input is answered by the tool itself, with the text the model reads.
    parser_classes = [ToolInputJSONParser]

    @extend_schema(
        parameters=SCOPE_PARAMETERS,
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, 201: OpenApiTypes.OBJECT},
        description=(
            "Run one command of Anthropic's memory tool (memory_20250818): view, create, str_replace, insert, "
            "delete, rename, with the model's input unchanged, plus an optional expected_sha256 (the sha256 "
            "last read) for str_replace, insert, delete and rename. `result` is the text the model reads; "
            "a refused command answers 4xx with `error` and `result`."
        ),
    )
    def post(self, request: Request) -> Response:
        try:
            access = request_file_access(request)
            if not isinstance(request.data, dict):
                raise MemoryFileError(
                    "invalid_body", "Error: The body must be the memory tool's input object.", field="command"
                )
            command = dict(request.data)
            expected = _expected_sha256(command.pop("expected_sha256", None))
            answer = memory_tool_run(access=access, command=command, expected_sha256=expected)
        except MemoryFileError as error:
            return tool_error_response(error)
        return Response({"result": answer.result, **answer.details}, status=answer.status)


class MemoryFilesListView(APIView):
    """GET the files that stand in a scope: path, sha256, size, version."""

    @extend_schema(
        parameters=[*SCOPE_PARAMETERS, OpenApiParameter("under", str, description="Only files under this path.")],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request) -> Response:
        access = request_file_access(request, extra=("under",))
        under = path_normalize(request.query_params.get("under", MEMORY_ROOT), field="under")
        files = files_list(access=access, under=under)
        return Response(
            {
                "files": [
                    {
                        "path": v.path,
                        "sha256": v.sha256,
                        "size": v.size,
                        "version": v.sequence,
                        "version_id": v.pk,
                        "author": v.author,
                        "scope": _scope_of(v),
                        "updated_at": v.created_at,
                    }
                    for v in files
                ]
            }
        )


class MemoryFileHistoryView(APIView):
    """GET every version of one path the scope reads, oldest first, deletions and renames included."""

    @extend_schema(
        parameters=[*SCOPE_PARAMETERS, OpenApiParameter("path", str, required=True)], responses=OpenApiTypes.OBJECT
    )
    def get(self, request: Request) -> Response:
        access = request_file_access(request, extra=("path",))
        path = path_normalize(request.query_params.get("path"), field="path")
        versions = file_history(access=access, path=path)
        if not versions:
            raise NotFound("The memory file", field="path")
        return Response({"path": path, "versions": [version_summary(v) for v in versions]})


class MemoryFileVersionView(APIView):
    """GET one version with its content (null for a deletion); another agent's answers 404."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, version_id: str) -> Response:
        version = version_for_agent(agent=request_agent(request), version_id=version_id)
        if version is None:
            raise NotFound("The memory file version")
        return Response({**version_summary(version), "content": version_content(version)})


class WorkingNoteView(APIView):
    """The working-memory note (reference 001): GET reads it, POST {"action", "content"} runs an action."""

    parser_classes = [ToolInputJSONParser]

    @extend_schema(parameters=SCOPE_PARAMETERS, responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        return self._run(request, {"action": "read"})

    @extend_schema(parameters=SCOPE_PARAMETERS, request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        return self._run(request, request.data)

    def _run(self, request: Request, body: Any) -> Response:
        action = body.get("action") if isinstance(body, dict) else None
        try:
            access = request_file_access(request)
            if not isinstance(body, dict):
                raise MemoryFileError("invalid_body", "Error: The body must be an object.", field="action")
            unknown = sorted(set(body) - {"action", "content"})
            if unknown:
                raise MemoryFileError(
                    "unknown_parameter", f"Error: Unknown parameter `{unknown[0]}`.", field=unknown[0]
                )
            if not isinstance(action, str):
                raise MemoryFileError(
                    "missing_parameter", "Error: `action` is required: read, replace or append.", field="action"
                )
            answer = working_note_run(access=access, action=action, content=body.get("content"))
        except MemoryFileError as error:
            details = {"action": action, "ok": False, "length": None}
            return tool_error_response(error, text=error.message, details=details)
        return Response(
            {"text": answer.text, "details": answer.details, "path": WORKING_NOTE_PATH, "version_id": answer.version_id}
        )
