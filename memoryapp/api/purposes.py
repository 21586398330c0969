"""The purposes an agent collects memory for (issue 25 §8, purpose limitation):
`GET|PATCH /api/v1/settings/purposes`.

Items and facts may carry some of them (`purposes` on a write); a search, a context or a facts
search that names a `purpose` recalls only the memory collected for it or for none
(memoryapp.items.purposes).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import OutputSerializer, StrictSerializer, validated
from memoryapp.items.purposes import agent_purposes_set


class PurposesOut(OutputSerializer):
    purposes = serializers.ListField(
        child=serializers.CharField(), help_text="The agent's purposes (empty: memory is not purpose-bound)."
    )


class PurposesInput(StrictSerializer):
    """The agent's purposes, all of them (a PATCH replaces the list)."""

    purposes = serializers.ListField(
        child=serializers.CharField(),
        help_text="Short slugs (a lower-case letter, then up to 31 letters, digits, - or _), e.g. support.",
    )


class PurposeSettingsView(APIView):
    """The agent's purposes (README "Purpose-bound recall")."""

    @extend_schema(responses={200: PurposesOut})
    def get(self, request: Request) -> Response:
        return Response(PurposesOut({"purposes": list(request_agent(request).purposes or [])}).data)

    @extend_schema(request=PurposesInput, responses={200: PurposesOut})
    def patch(self, request: Request) -> Response:
        agent = request_agent(request)
        data = validated(PurposesInput, request.data)
        # The service checks each name (a 400 naming `purposes[i]`).
        purposes = agent_purposes_set(agent=agent, values=data["purposes"], actor=f"agent:{agent.slug}")
        return Response(PurposesOut({"purposes": purposes}).data)
