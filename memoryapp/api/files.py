"""The agent API of memory files: the memory tool, lists, history, versions, the working note.

The scope of a request (user_id, project_id, thread_id, and optionally place, read_only,
author) comes from the query string, so the body of POST /memory-tool can be the model's tool
input unchanged. A refused command answers 4xx with the usual error shape AND `result`, the
text the model should read, so a client can pass any answer through as the tool result.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import OutputSerializer, TextOrNullField
from memoryapp.api.errors import ErrorOut, error_body
from memoryapp.api.parsers import ToolInputJSONParser
from memoryapp.errors import NotFound
from memoryapp.files.access import AGENT_AUTHORS, FileAccess, file_access_for
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.paths import MEMORY_ROOT, path_normalize
from memoryapp.files.protocol import memory_tool_run
from memoryapp.files.selectors import file_history, version_content, version_for_agent
from memoryapp.files.services import expected_sha_parse, files_list
from memoryapp.files.working_note import WORKING_NOTE_PATH, working_note_run
from memoryapp.models import MemoryFileVersion
from memoryapp.models.choices import FileAuthor

_SCOPE_PARAMS = ("user_id", "project_id", "thread_id")
_ACCESS_PARAMS = (*_SCOPE_PARAMS, "place", "read_only", "author")
PATH_KINDS = ("file", "directory")


SCOPE_PARAMETERS = [
    OpenApiParameter("user_id", str, description="The person the files are about ('' or absent: not limited)."),
    OpenApiParameter("project_id", str, description="The project ('' or absent: not limited)."),
    OpenApiParameter("thread_id", str, description="The thread's external id ('' or absent: not limited)."),
    OpenApiParameter("place", str, description="The entry a change is written after: its branch sees it."),
    OpenApiParameter("read_only", bool, description="Refuse every change (the model only reads)."),
    OpenApiParameter("author", str, enum=list(AGENT_AUTHORS), description="Who writes: model (default), user, system."),
]


def request_file_access(request: Request, *, extra: tuple[str, ...] = ()) -> FileAccess:
    """The access a request asks for, within its agent; unknown query parameters are refused."""
    params = request.query_params
    for name in params:
        if name not in _ACCESS_PARAMS and name not in extra:
            raise MemoryFileError("unknown_parameter", f"Error: Unknown query parameter `{name}`.", field=name)
    read_only = params.get("read_only", "false").lower()
    if read_only not in ("true", "false", "1", "0"):
        raise MemoryFileError("invalid_value", "Error: `read_only` must be true or false.", field="read_only")
    return file_access_for(
        agent=request_agent(request),
        user_id=params.get("user_id", ""),
        project_id=params.get("project_id", ""),
        thread_id=params.get("thread_id", ""),
        read_only=read_only in ("true", "1"),
        author=params.get("author", FileAuthor.MODEL),
        place_id=params.get("place", ""),
    )


def tool_error_response(error: MemoryFileError, **more: Any) -> Response:
    return Response(
        {**error_body(error.code, error.message, error.field), "result": error.message, **more}, error.status
    )


# --- output serializers --------------------------------------------------------------------


class ScopeOut(OutputSerializer):
    user_id = serializers.CharField()
    project_id = serializers.CharField()
    thread_id = serializers.CharField()


class MemoryFileOut(OutputSerializer):
    path = serializers.CharField()
    sha256 = serializers.CharField()
    size = serializers.IntegerField(help_text="Bytes of UTF-8.")
    version = serializers.IntegerField(source="sequence")
    version_id = serializers.CharField(source="pk")
    author = serializers.ChoiceField(choices=FileAuthor.choices)
    scope = ScopeOut(source="*")
    updated_at = serializers.DateTimeField(source="created_at", help_text="When this version was written.")


class MemoryFilesOut(OutputSerializer):
    files = MemoryFileOut(many=True)


class VersionOut(OutputSerializer):
    version_id = serializers.CharField(source="pk")
    path = serializers.CharField()
    version = serializers.IntegerField(source="sequence")
    sha256 = serializers.CharField(help_text="'' for a deletion (an empty file has the sha256 of '').")
    size = serializers.IntegerField()
    deleted = serializers.SerializerMethodField(help_text="This version deletes the file.")
    renamed_from = TextOrNullField(help_text="The path it was renamed from (null: not a rename).")
    previous_id = serializers.CharField(allow_null=True, help_text="The version this one follows.")
    author = serializers.ChoiceField(choices=FileAuthor.choices)
    place = serializers.CharField(source="place_id", allow_null=True, help_text="The entry it was written after.")
    scope = ScopeOut(source="*")
    created_at = serializers.DateTimeField()
    redacted = serializers.SerializerMethodField()

    def get_deleted(self, version: MemoryFileVersion) -> bool:
        # A deletion has no content, so no sha256 (an empty file has the sha256 of "").
        return version.sha256 == ""

    def get_redacted(self, version: MemoryFileVersion) -> bool:
        return version.redacted_at is not None


class FileHistoryOut(OutputSerializer):
    path = serializers.CharField()
    versions = VersionOut(many=True, help_text="Oldest first, deletions and renames included.")


class VersionContentOut(VersionOut):
    content = serializers.SerializerMethodField()

    @extend_schema_field({"type": "string", "nullable": True, "description": "null for a deletion."})
    def get_content(self, version: MemoryFileVersion) -> str | None:
        return version_content(version)


class DirectoryEntryOut(OutputSerializer):
    path = serializers.CharField()
    kind = serializers.ChoiceField(choices=PATH_KINDS)
    size = serializers.IntegerField(help_text="A directory's: the total of the files under it.")


class MovedFileOut(OutputSerializer):
    def get_fields(self) -> dict[str, serializers.Field]:
        # `from` is a Python keyword, so it cannot be a class attribute.
        return {
            "from": serializers.CharField(),
            "to": serializers.CharField(),
            "version_id": serializers.CharField(help_text="The version written at the new path."),
        }


class MemoryToolAnswerOut(OutputSerializer):
    """The answer of a memory tool command: `result` for the model, and fields for programs.

    Which fields come depends on the command: `view` of a file (kind, lines, path, sha256, size,
    version, version_id), `view` of a directory (kind, path, size, entries), `create`,
    `str_replace` and `insert` (path, sha256, size, version, version_id), `delete` (path,
    deleted), `rename` (old_path, new_path, moved).
    """

    result = serializers.CharField(help_text="The text the model reads (as Anthropic's memory tool answers).")
    command = serializers.CharField()
    kind = serializers.ChoiceField(choices=PATH_KINDS, required=False, help_text="view: what the path is.")
    lines = serializers.IntegerField(required=False, help_text="view of a file: its number of lines.")
    path = serializers.CharField(required=False)
    sha256 = serializers.CharField(required=False, help_text="The version's sha256: send it as expected_sha256.")
    size = serializers.IntegerField(required=False)
    version = serializers.IntegerField(required=False)
    version_id = serializers.CharField(required=False)
    entries = DirectoryEntryOut(many=True, required=False, help_text="view of a directory: two levels of it.")
    deleted = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="delete: the files it deleted."
    )
    old_path = serializers.CharField(required=False)
    new_path = serializers.CharField(required=False)
    moved = MovedFileOut(many=True, required=False, help_text="rename: every file moved.")


class MemoryToolErrorOut(ErrorOut):
    """A refused command: the error shape, and `result`, the text the model should read."""

    result = serializers.CharField()


class WorkingNoteDetailsOut(OutputSerializer):
    action = serializers.CharField(allow_null=True)
    ok = serializers.BooleanField()
    length = serializers.IntegerField(allow_null=True, help_text="Characters of the note (null on an error).")


class WorkingNoteOut(OutputSerializer):
    text = serializers.CharField(help_text="The note (after the action).")
    details = WorkingNoteDetailsOut()
    path = serializers.CharField()
    version_id = serializers.CharField(allow_null=True, help_text="The version written (null: nothing changed).")


class WorkingNoteErrorOut(MemoryToolErrorOut):
    text = serializers.CharField()
    details = WorkingNoteDetailsOut()


def _refusals(shape: type[serializers.Serializer]) -> dict[int, OpenApiResponse]:
    return {
        status: OpenApiResponse(shape, description=text)
        for status, text in (
            (400, "A command or parameter the tool refuses; `result` is the text for the model."),
            (403, "A read-only request or a path kept by memory itself."),
            (404, "No such file or directory (or place entry)."),
            (409, "The file changed since it was read (expected_sha256), or the path is taken."),
            (413, "A file or a change too large."),
        )
    }


class MemoryToolView(APIView):
    """POST the model's memory tool input ({"command": "view", "path": "/memories"}), get `result`."""

    # A NUL in the tool's input is answered by the tool itself, with the text the model reads.
    parser_classes = [ToolInputJSONParser]

    @extend_schema(
        parameters=SCOPE_PARAMETERS,
        request=OpenApiTypes.OBJECT,
        responses={
            200: MemoryToolAnswerOut,
            201: OpenApiResponse(MemoryToolAnswerOut, description="create: the file was created."),
            **_refusals(MemoryToolErrorOut),
        },
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
            expected = expected_sha_parse(command.pop("expected_sha256", None))
            answer = memory_tool_run(access=access, command=command, expected_sha256=expected)
        except MemoryFileError as error:
            return tool_error_response(error)
        return Response(MemoryToolAnswerOut({"result": answer.result, **answer.details}).data, status=answer.status)


class MemoryFilesListView(APIView):
    """GET the files that stand in a scope: path, sha256, size, version."""

    @extend_schema(
        parameters=[*SCOPE_PARAMETERS, OpenApiParameter("under", str, description="Only files under this path.")],
        responses={200: MemoryFilesOut},
    )
    def get(self, request: Request) -> Response:
        access = request_file_access(request, extra=("under",))
        under = path_normalize(request.query_params.get("under", MEMORY_ROOT), field="under")
        files = files_list(access=access, under=under)
        return Response(MemoryFilesOut({"files": files}).data)


class MemoryFileHistoryView(APIView):
    """GET every version of one path the scope reads, oldest first, deletions and renames included."""

    @extend_schema(
        parameters=[*SCOPE_PARAMETERS, OpenApiParameter("path", str, required=True)],
        responses={200: FileHistoryOut},
    )
    def get(self, request: Request) -> Response:
        access = request_file_access(request, extra=("path",))
        path = path_normalize(request.query_params.get("path"), field="path")
        versions = file_history(access=access, path=path)
        if not versions:
            raise NotFound("The memory file", field="path")
        return Response(FileHistoryOut({"path": path, "versions": versions}).data)


class MemoryFileVersionView(APIView):
    """GET one version with its content (null for a deletion); another agent's answers 404."""

    @extend_schema(responses={200: VersionContentOut})
    def get(self, request: Request, version_id: str) -> Response:
        version = version_for_agent(agent=request_agent(request), version_id=version_id)
        if version is None:
            raise NotFound("The memory file version")
        return Response(VersionContentOut(version).data)


class WorkingNoteView(APIView):
    """The working-memory note (reference 001): GET reads it, POST {"action", "content"} runs an action."""

    parser_classes = [ToolInputJSONParser]

    @extend_schema(parameters=SCOPE_PARAMETERS, responses={200: WorkingNoteOut, **_refusals(WorkingNoteErrorOut)})
    def get(self, request: Request) -> Response:
        return self._run(request, {"action": "read"})

    @extend_schema(
        parameters=SCOPE_PARAMETERS,
        request=OpenApiTypes.OBJECT,
        responses={200: WorkingNoteOut, **_refusals(WorkingNoteErrorOut)},
    )
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
            WorkingNoteOut(
                {
                    "text": answer.text,
                    "details": answer.details,
                    "path": WORKING_NOTE_PATH,
                    "version_id": answer.version_id,
                }
            ).data
        )
