"""Knowledge documents over the agent API (004 `includeSemanticContext`): texts the agent's contexts
may cite, chunked and embedded, searched apart from conversation memory.

- GET  /knowledge?project_id=          the agent's documents (of one project, when named)
- POST /knowledge                      add one {name, content, project_id?} (409 name_taken)
- GET|PUT|DELETE /knowledge/{id}       read one (with its text), replace its text (and name), delete it
- POST /knowledge/search               {text, project_id?, limit?}: the best passages
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import OutputSerializer, StrictSerializer, validated
from memoryapp.errors import DomainError
from memoryapp.knowledge.services import (
    MAX_DOCUMENT_CHARS,
    knowledge_document_add,
    knowledge_document_delete,
    knowledge_document_replace,
    knowledge_documents,
    knowledge_for_agent,
    knowledge_search,
)


def _actor(request: Request) -> str:
    return f"agent:{request_agent(request).slug}"


class KnowledgeDocumentOut(OutputSerializer):
    id = serializers.CharField()
    name = serializers.CharField()
    project_id = serializers.CharField(help_text='The project it belongs to ("": every context of the agent).')
    sha256 = serializers.CharField()
    chunk_count = serializers.IntegerField(help_text="The passages it was cut into.")
    added_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class KnowledgeDocumentContentOut(KnowledgeDocumentOut):
    content = serializers.CharField()


class KnowledgeDocumentsOut(OutputSerializer):
    documents = KnowledgeDocumentOut(many=True)


class KnowledgeAddInput(StrictSerializer):
    name = serializers.CharField(max_length=255)
    content = serializers.CharField(trim_whitespace=False, max_length=MAX_DOCUMENT_CHARS)
    project_id = serializers.CharField(required=False, allow_blank=True, max_length=128, default="")


class KnowledgeReplaceInput(StrictSerializer):
    content = serializers.CharField(trim_whitespace=False, max_length=MAX_DOCUMENT_CHARS)
    name = serializers.CharField(required=False, max_length=255)


class KnowledgeSearchInput(StrictSerializer):
    text = serializers.CharField(max_length=10_000)
    project_id = serializers.CharField(required=False, allow_blank=True, max_length=128, default="")
    limit = serializers.IntegerField(required=False, min_value=1, max_value=50, default=5)


class KnowledgeHitOut(OutputSerializer):
    document_id = serializers.CharField()
    name = serializers.CharField()
    seq = serializers.IntegerField(help_text="The passage's place in its document.")
    text = serializers.CharField()
    score = serializers.FloatField()
    channels = serializers.ListField(child=serializers.CharField())


class KnowledgeSearchOut(OutputSerializer):
    results = KnowledgeHitOut(many=True)


class KnowledgeDocumentsView(APIView):
    @extend_schema(
        operation_id="v1_knowledge_list",
        parameters=[OpenApiParameter("project_id", str, description="Only the documents of this project.")],
        responses={200: KnowledgeDocumentsOut},
    )
    def get(self, request: Request) -> Response:
        for name in request.query_params:
            if name != "project_id":
                raise DomainError("unknown_parameter", f"Unknown query parameter `{name}`.", field=name)
        project = request.query_params.get("project_id")
        if project is not None and len(project) > 128:
            raise DomainError("invalid_value", "project_id holds at most 128 characters.", field="project_id")
        rows = knowledge_documents(agent=request_agent(request), project_id=project)
        return Response(KnowledgeDocumentsOut({"documents": list(rows)}).data)

    @extend_schema(
        operation_id="v1_knowledge_create", request=KnowledgeAddInput, responses={201: KnowledgeDocumentContentOut}
    )
    def post(self, request: Request) -> Response:
        data = validated(KnowledgeAddInput, request.data)
        document = knowledge_document_add(
            agent=request_agent(request),
            name=data["name"],
            content=data["content"],
            project_id=data["project_id"],
            added_by="agent",
            actor=_actor(request),
        )
        return Response(KnowledgeDocumentContentOut(document).data, status=status.HTTP_201_CREATED)


class KnowledgeDocumentView(APIView):
    @extend_schema(responses={200: KnowledgeDocumentContentOut})
    def get(self, request: Request, document_id: str) -> Response:
        document = knowledge_for_agent(agent=request_agent(request), document_id=document_id)
        return Response(KnowledgeDocumentContentOut(document).data)

    @extend_schema(request=KnowledgeReplaceInput, responses={200: KnowledgeDocumentContentOut})
    def put(self, request: Request, document_id: str) -> Response:
        document = knowledge_for_agent(agent=request_agent(request), document_id=document_id)
        data = validated(KnowledgeReplaceInput, request.data)
        replaced = knowledge_document_replace(
            document=document, content=data["content"], name=data.get("name"), actor=_actor(request)
        )
        return Response(KnowledgeDocumentContentOut(replaced).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, document_id: str) -> Response:
        document = knowledge_for_agent(agent=request_agent(request), document_id=document_id)
        knowledge_document_delete(document=document, actor=_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class KnowledgeSearchView(APIView):
    @extend_schema(request=KnowledgeSearchInput, responses={200: KnowledgeSearchOut})
    def post(self, request: Request) -> Response:
        data = validated(KnowledgeSearchInput, request.data)
        hits = knowledge_search(
            agent=request_agent(request), text=data["text"], project_id=data["project_id"], limit=data["limit"]
        )
        return Response(KnowledgeSearchOut({"results": [h.as_json() for h in hits]}).data)
