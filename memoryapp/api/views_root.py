from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import OutputSerializer


class AgentOut(OutputSerializer):
    slug = serializers.CharField()
    name = serializers.CharField()


class EndpointsOut(OutputSerializer):
    threads = serializers.URLField()
    entries = serializers.CharField(help_text="A URL template: {id} is an entry's id.")
    search = serializers.URLField()
    items = serializers.URLField()
    facts = serializers.CharField(help_text="A URL template: {namespace} is a namespace.")
    memory_tool = serializers.URLField()


class ApiRootOut(OutputSerializer):
    agent = AgentOut(help_text="The agent whose key called.")
    version = serializers.CharField()
    schema = serializers.URLField(help_text="This OpenAPI schema.")
    docs = serializers.URLField(help_text="The docs page.")
    endpoints = EndpointsOut()


class ApiRootView(APIView):
    """The API's root: who is calling, and where things are."""

    @extend_schema(responses={200: ApiRootOut})
    def get(self, request: Request) -> Response:
        agent = request_agent(request)
        base = request.build_absolute_uri("/api/v1/")
        return Response(
            ApiRootOut(
                {
                    "agent": agent,
                    "version": "v1",
                    "schema": request.build_absolute_uri("/api/schema/"),
                    "docs": request.build_absolute_uri("/api/docs/"),
                    "endpoints": {
                        "threads": base + "threads",
                        "entries": base + "entries/{id}",
                        "search": base + "search",
                        "items": base + "items",
                        "facts": base + "facts/{namespace}",
                        "memory_tool": base + "memory-tool",
                    },
                }
            ).data
        )
