"""Screening at write and the people memory is about (issue 25 §1, §3):

- `GET|PATCH /api/v1/settings/screening`: the agent's action per category.
- `PUT|GET /api/v1/users/{user_id}/identifiers`: the person's registered identifiers.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import OutputSerializer, StrictSerializer, validated
from memoryapp.errors import DomainError
from memoryapp.ids import person_id_check
from memoryapp.screening.identifiers import identifiers_of, identifiers_set
from memoryapp.screening.policy import ACTIONS, policy_effective, screening_policy_set
from memoryapp.subjects.index import subject_index_schedule


class _Policy(serializers.Serializer):
    email = serializers.ChoiceField(choices=ACTIONS, help_text="E-mail addresses (default allow).")
    phone = serializers.ChoiceField(choices=ACTIONS, help_text="Phone numbers (default allow).")
    payment_card = serializers.ChoiceField(choices=ACTIONS, help_text="Card numbers passing Luhn (default redact).")
    iban = serializers.ChoiceField(choices=ACTIONS, help_text="IBANs passing mod-97 (default allow).")
    national_id = serializers.ChoiceField(choices=ACTIONS, help_text="National id numbers (default allow).")
    ip_address = serializers.ChoiceField(choices=ACTIONS, help_text="IPv4 and IPv6 addresses (default allow).")
    secret = serializers.ChoiceField(
        choices=ACTIONS, help_text="API keys, tokens, private keys, password=... (default refuse)."
    )
    person = serializers.ChoiceField(
        choices=ACTIONS, help_text="Identifiers of people registered with PUT /users/{id}/identifiers (default allow)."
    )


class ScreeningPolicyOut(OutputSerializer, _Policy):
    """The action of every category: allow, redact (a typed placeholder such as [email] is stored
    instead), hold (stored, out of search, context and extraction until a reviewer releases it),
    refuse (422 sensitive_data, nothing stored)."""


class ScreeningPolicyInput(StrictSerializer, _Policy):
    """Only the categories given change."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        for field in self.fields.values():
            field.required = False


class ScreeningSettingsView(APIView):
    """The agent's screening policy (README "Screening at write")."""

    @extend_schema(responses={200: ScreeningPolicyOut})
    def get(self, request: Request) -> Response:
        return Response(ScreeningPolicyOut(policy_effective(request_agent(request).screening)).data)

    @extend_schema(request=ScreeningPolicyInput, responses={200: ScreeningPolicyOut})
    def patch(self, request: Request) -> Response:
        agent = request_agent(request)
        data = validated(ScreeningPolicyInput, request.data)
        policy = screening_policy_set(agent=agent, values=data, actor=f"agent:{agent.slug}")
        return Response(ScreeningPolicyOut(policy).data)


class _Identifiers(serializers.Serializer):
    emails = serializers.ListField(child=serializers.CharField(), help_text="Lower-cased.")
    phones = serializers.ListField(child=serializers.CharField(), help_text="With the country code; answered in E.164.")
    names = serializers.ListField(child=serializers.CharField(), help_text="Answered case- and accent-folded.")
    external_ids = serializers.ListField(child=serializers.CharField(), help_text="Ids other systems know them by.")


class IdentifiersInput(_Identifiers):
    """The person's identifiers, all of them (a PUT replaces what was registered; a list left out is empty)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        for field in self.fields.values():
            field.required = False


class IdentifiersOut(OutputSerializer, _Identifiers):
    user_id = serializers.CharField()


def user_id_check(user_id: str) -> str:
    """The person of the path, by the one rule of person ids (as `POST /users/{user_id}/forget`)."""
    if not user_id:
        raise DomainError("invalid_value", "user_id must not be empty.", field="user_id")
    return person_id_check(user_id)


class UserIdentifiersView(APIView):
    """The identifiers of a person the agent's memory is about, normalised and sealed under the
    person's key; screening's `person` category finds them in what the agent writes, and the
    person's erasure deletes them."""

    @extend_schema(responses={200: IdentifiersOut})
    def get(self, request: Request, user_id: str) -> Response:
        agent = request_agent(request)
        user_id = user_id_check(user_id)
        return Response(IdentifiersOut({"user_id": user_id, **identifiers_of(agent=agent, user_id=user_id)}).data)

    @extend_schema(request=IdentifiersInput, responses={200: IdentifiersOut})
    def put(self, request: Request, user_id: str) -> Response:
        agent = request_agent(request)
        user_id = user_id_check(user_id)
        # The checks of the service name the field (`phones[1]`) and normalise; the serializer is
        # the schema's statement of the shape.
        body = request.data if request.data is not None else {}
        checked = identifiers_set(agent=agent, user_id=user_id, body=body, actor=f"agent:{agent.slug}")
        # The subject index follows the registry: the person's mentions are found again (a job).
        subject_index_schedule(agent_id=agent.pk, user_id=user_id)
        return Response(IdentifiersOut({"user_id": user_id, **checked}).data)
