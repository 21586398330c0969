"""Standing instructions over the agent API: context documents (001 AGENTS.md) and a thread's memory
switch (001 `/memory on|off|status`).

- GET /context-documents?project_id=|thread_id=        the documents of one scope (none: the agent's)
- GET|PUT|DELETE /context-documents/{name}?...          one document: read, write (a version), delete
- GET|PUT /threads/{id}/memory                          the switch: {"memory": "on"|"off"}

A document's history is the memory file's: GET /memory-files/history?path=/memories/context/{name}.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import OutputSerializer, StrictSerializer, validated
from memoryapp.errors import DomainError
from memoryapp.files.context_documents import (
    DocumentScope,
    context_document_delete,
    context_document_get,
    context_document_put,
    context_documents_list,
    document_scope,
)
from memoryapp.files.services import UNCHECKED, ExpectedSha
from memoryapp.models import MemoryFileVersion, Thread
from memoryapp.threads.memory_switch import memory_off_ranges, thread_memory_set
from memoryapp.threads.selectors import thread_for_agent

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

SCOPE_PARAMETERS = [
    OpenApiParameter("project_id", str, description="The project the document belongs to (absent: the agent)."),
    OpenApiParameter("thread_id", str, description="The thread the document belongs to (absent: the agent)."),
]


def _actor(request: Request) -> str:
    return f"agent:{request_agent(request).slug}"


def _scope(request: Request) -> DocumentScope:
    params = request.query_params
    for name in params:
        if name not in ("project_id", "thread_id"):
            raise DomainError("unknown_parameter", f"Unknown query parameter `{name}`.", field=name)
    values = {}
    for name in ("project_id", "thread_id"):
        value = params.get(name, "")
        if len(value) > 128 or any(not ch.isprintable() for ch in value):
            raise DomainError("invalid_scope", f"`{name}` must be at most 128 printable characters.", field=name)
        values[name] = value
    return document_scope(**values)


class ContextDocumentOut(OutputSerializer):
    name = serializers.SerializerMethodField()
    path = serializers.CharField()
    scope = serializers.SerializerMethodField(help_text="agent, project or thread.")
    project_id = serializers.CharField()
    thread_id = serializers.CharField()
    sha256 = serializers.CharField()
    size = serializers.IntegerField(help_text="Bytes of UTF-8.")
    version = serializers.IntegerField(source="sequence")
    version_id = serializers.CharField(source="pk")
    updated_at = serializers.DateTimeField(source="created_at", help_text="When this version was written.")

    def get_name(self, version: MemoryFileVersion) -> str:
        return version.path.rsplit("/", 1)[1]

    def get_scope(self, version: MemoryFileVersion) -> str:
        return "thread" if version.thread_id else "project" if version.project_id else "agent"


class ContextDocumentContentOut(ContextDocumentOut):
    content = serializers.CharField()


class ContextDocumentsOut(OutputSerializer):
    documents = ContextDocumentOut(many=True)


class ContextDocumentInput(StrictSerializer):
    content = serializers.CharField(allow_blank=True, trim_whitespace=False, help_text="The whole document.")
    expected_sha256 = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="The sha256 last read (optimistic locking); null: the document must not exist yet.",
    )


class ContextDocumentsView(APIView):
    """GET: the documents of one scope (the agent's, a project's or a thread's)."""

    @extend_schema(
        operation_id="v1_context_documents_list", parameters=SCOPE_PARAMETERS, responses={200: ContextDocumentsOut}
    )
    def get(self, request: Request) -> Response:
        agent, scope = request_agent(request), _scope(request)
        return Response(ContextDocumentsOut({"documents": context_documents_list(agent=agent, scope=scope)}).data)


class ContextDocumentView(APIView):
    """One context document of a scope: read it, write it (a new version), delete it."""

    @extend_schema(parameters=SCOPE_PARAMETERS, responses={200: ContextDocumentContentOut})
    def get(self, request: Request, name: str) -> Response:
        version = context_document_get(agent=request_agent(request), scope=_scope(request), name=name)
        return Response(ContextDocumentContentOut(version).data)

    @extend_schema(
        parameters=SCOPE_PARAMETERS,
        request=ContextDocumentInput,
        responses={
            200: OpenApiResponse(ContextDocumentContentOut, description="Changed (or the same text: no new version)."),
            201: OpenApiResponse(ContextDocumentContentOut, description="Created."),
        },
    )
    def put(self, request: Request, name: str) -> Response:
        agent, scope = request_agent(request), _scope(request)
        data = validated(ContextDocumentInput, request.data)
        expected: ExpectedSha = UNCHECKED
        if "expected_sha256" in data:
            raw = data["expected_sha256"]
            if raw is not None and not _SHA256.match(raw):
                raise DomainError(
                    "invalid_value", "expected_sha256 must be 64 lowercase hex digits.", field="expected_sha256"
                )
            expected = raw
        version, created = context_document_put(
            agent=agent,
            scope=scope,
            name=name,
            content=data["content"],
            expected_sha256=expected,
            actor=_actor(request),
        )
        answer = ContextDocumentContentOut(version).data
        return Response(answer, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(
        parameters=SCOPE_PARAMETERS,
        responses={204: OpenApiResponse(description="Deleted (a version without content; its history stays).")},
    )
    def delete(self, request: Request, name: str) -> Response:
        context_document_delete(agent=request_agent(request), scope=_scope(request), name=name, actor=_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- the memory switch ------------------------------------------------------------------------------


class OffRangeOut(OutputSerializer):
    from_seq = serializers.IntegerField()
    to_seq = serializers.IntegerField(allow_null=True, help_text="null: memory is still off.")


class ThreadMemoryOut(OutputSerializer):
    thread_id = serializers.CharField()
    memory = serializers.ChoiceField(choices=("on", "off"))
    off_ranges = OffRangeOut(
        many=True, help_text="The seqs written while memory was off: never extracted, also once it is on."
    )


class ThreadMemoryInput(StrictSerializer):
    memory = serializers.ChoiceField(choices=("on", "off"))


def _memory_json(thread: Thread) -> dict[str, Any]:
    ranges = [{"from_seq": r.get("from_seq"), "to_seq": r.get("to_seq")} for r in memory_off_ranges(thread)]
    return {"thread_id": thread.external_id, "memory": "on" if thread.memory_enabled else "off", "off_ranges": ranges}


class ThreadMemoryView(APIView):
    """GET: the thread's memory switch (status); PUT {"memory": "on"|"off"} sets it. Off: nothing is
    extracted from the thread and nothing recalled into its contexts."""

    @extend_schema(responses={200: ThreadMemoryOut})
    def get(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        return Response(ThreadMemoryOut(_memory_json(thread)).data)

    @extend_schema(request=ThreadMemoryInput, responses={200: ThreadMemoryOut})
    def put(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        data = validated(ThreadMemoryInput, request.data)
        thread = thread_memory_set(thread=thread, enabled=data["memory"] == "on", actor=_actor(request))
        return Response(ThreadMemoryOut(_memory_json(thread)).data)
