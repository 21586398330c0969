"""Search and context building over the agent API: POST /search, POST /threads/{id}/context."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import StrictSerializer, validated
from memoryapp.context.builder import MAX_TOKENS_LIMIT, STRATEGIES, ContextRequest, context_build
from memoryapp.search.retrieval import KINDS, METHODS, search
from memoryapp.selectors.threads import thread_for_agent

MAX_TEXT = 10_000


class SearchInput(StrictSerializer):
    text = serializers.CharField(max_length=MAX_TEXT, allow_blank=False, trim_whitespace=True)
    thread_id = serializers.CharField(max_length=128, required=False)
    user_id = serializers.CharField(max_length=128, required=False, allow_blank=True)
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=KINDS), required=False, min_length=1, max_length=len(KINDS)
    )
    limit = serializers.IntegerField(min_value=1, max_value=100, required=False, default=10)
    method = serializers.ChoiceField(choices=METHODS, required=False, default="hybrid")
    as_of = serializers.DateTimeField(required=False)


class SearchView(APIView):
    @extend_schema(request=SearchInput, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        agent = request_agent(request)
        data = validated(SearchInput, request.data)
        thread = thread_for_agent(agent=agent, external_id=data["thread_id"]) if data.get("thread_id") else None
        outcome = search(
            agent=agent,
            text=data["text"],
            thread=thread,
            user_id=data.get("user_id"),
            kinds=tuple(data.get("kinds") or KINDS),
            limit=data["limit"],
            method=data["method"],
            as_of=data.get("as_of"),
        )
        return Response(
            {
                "results": [hit.as_json() for hit in outcome.hits],
                "errors": outcome.errors,
                "warnings": outcome.warnings,
            }
        )


class PartitionsField(serializers.DictField):
    child = serializers.FloatField(min_value=0, max_value=1)


class ContextInput(StrictSerializer):
    strategy = serializers.ChoiceField(choices=STRATEGIES, required=False, default="hybrid")
    max_tokens = serializers.IntegerField(min_value=1, max_value=MAX_TOKENS_LIMIT)
    reserve_tokens = serializers.IntegerField(min_value=0, required=False)
    system_prompt = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="")
    pinned = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False), required=False, default=list
    )
    index = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="")
    brief = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="")
    current_input = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False, default="", max_length=MAX_TEXT * 10
    )
    leaf_id = serializers.CharField(required=False, allow_null=True, max_length=40)
    as_of = serializers.DateTimeField(required=False, allow_null=True)
    include_facts = serializers.BooleanField(required=False, default=True)
    partitions = PartitionsField(required=False, allow_empty=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        reserve = attrs.get("reserve_tokens")
        if reserve is not None and reserve >= attrs["max_tokens"]:
            raise serializers.ValidationError({"reserve_tokens": ["Must be less than max_tokens."]})
        return attrs


class ContextView(APIView):
    @extend_schema(request=ContextInput, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, thread_id: str) -> Response:
        agent = request_agent(request)
        thread = thread_for_agent(agent=agent, external_id=thread_id)
        data = validated(ContextInput, request.data)
        built = context_build(agent=agent, thread=thread, request=ContextRequest(**data))
        return Response(built)
