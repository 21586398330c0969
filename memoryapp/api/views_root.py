from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent


class ApiRootView(APIView):
    """The API's root: who is calling, and where things are."""

    def get(self, request: Request) -> Response:
        agent = request_agent(request)
        base = request.build_absolute_uri("/api/v1/")
        return Response(
            {
                "agent": {"slug": agent.slug, "name": agent.name},
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
        )
