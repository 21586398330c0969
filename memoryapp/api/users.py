"""The person an agent's memory is about: `POST /api/v1/users/{user_id}/forget` erases it.

The agent's own erasure of a person (004 deleteUser, 002 forgetAll): every thread about them,
their messages in threads of others with the replies, their items, facts, entities and memory
files, and the job runs naming them, of the calling agent only (`person_erase` with its agent).
Staff erasure requests across agents, with a report, live in governance.

A legal hold in force on the person, or on one of her threads, in the calling agent (the match a
staff request makes: governance.erasure.services.holds_in_the_way) refuses it: 409 `legal_hold`
with the hold ids, nothing changed (GDPR art. 17(3)(e)); the refusal is audited with ids only. The
holds are read under her erasure lock in the agent (`erasure_gate`: the rule of
memoryapp.subjects.erasing step 6), so a hold committed before the erasure has its lock is read.
"""

from __future__ import annotations

from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from governance.audit.chain import audit_append
from governance.erasure.services import holds_in_the_way
from governance.export.services import exports_forget_person
from memoryapp.api.auth import request_agent
from memoryapp.api.base import OutputSerializer, StrictSerializer, validated
from memoryapp.api.errors import ErrorOut
from memoryapp.errors import Conflict, DomainError
from memoryapp.forgetting.mentions import MENTION_MODES, mentions_counts
from memoryapp.forgetting.person import MODES, person_erase
from memoryapp.ids import person_id_check
from memoryapp.screening.identifiers import identifiers_given
from memoryapp.subjects.erasing import erasure_gate


class UserForgetInput(StrictSerializer):
    # erase: deleted; redact: the threads stay with every entry redacted, files redacted then deleted.
    mode = serializers.ChoiceField(choices=MODES, required=False, default="erase")
    # Identifiers of the person besides those registered: the rows of others naming them by any
    # (registered or given) are redacted (`redact`, the default) or left as they are (`keep`).
    identifiers = serializers.JSONField(required=False, help_text="{emails, phones, names, external_ids}")
    mentions = serializers.ChoiceField(choices=MENTION_MODES, required=False, default="redact")


class ForgetCountsOut(OutputSerializer):
    """What went, counted by kind (004's names)."""

    entries_deleted = serializers.IntegerField()
    entries_redacted = serializers.IntegerField()
    threads = serializers.IntegerField()
    summaries = serializers.IntegerField()
    items_purged = serializers.IntegerField()
    items_trimmed = serializers.IntegerField()
    items_stale = serializers.IntegerField()
    entities = serializers.IntegerField()
    facts = serializers.IntegerField()
    file_versions = serializers.IntegerField()
    playbook_rules = serializers.IntegerField()
    vectors = serializers.IntegerField()
    job_runs = serializers.IntegerField()
    sessions = serializers.IntegerField(help_text="Their channel sessions (deleted in either mode).")
    mentions = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="The rows naming the person, by kind and table (`redacted_entry`, `deleted_item`, ...).",
    )


class UserForgetOut(OutputSerializer):
    user_id = serializers.CharField()
    mode = serializers.ChoiceField(choices=MODES)
    counts = ForgetCountsOut()


class UserForgetView(APIView):
    """POST: erase what the calling agent holds about the person; answers with the counts (a second
    call finds nothing and answers zeros)."""

    @extend_schema(request=UserForgetInput, responses={200: UserForgetOut, 409: ErrorOut})
    def post(self, request: Request, user_id: str) -> Response:
        agent = request_agent(request)
        # The one rule of person ids (memoryapp.ids.person_id_check): every id stored is one this path can name.
        if not user_id:
            raise DomainError("invalid_value", "user_id must not be empty.", field="user_id")
        user_id = person_id_check(user_id)
        data = validated(UserForgetInput, request.data if request.data is not None else {})
        given = identifiers_given(data.get("identifiers"), field="identifiers")
        # A web worker never waits on a running erasure of the person: 409 `erasure_running`.
        with erasure_gate(
            user_id=user_id,
            agent_ids=[agent.pk],
            holds=lambda: holds_in_the_way(user_id=user_id, agent_ids=[agent.pk]),
            wait=False,
        ) as gate:
            _holds_refuse(agent_id=agent.pk, actor=f"agent:{agent.slug}", user_id=user_id, held=gate.holds)
            counts = person_erase(
                user_id=user_id,
                agent_ids=[agent.pk],
                mode=data["mode"],
                actor=f"agent:{agent.slug}",
                identifiers=given,
                mentions=data["mentions"],
                wait=False,
            )
            # A staff export of the person holding this agent's memory of them is a copy of what went.
            with transaction.atomic():
                exports_forget_person(user_id=user_id, actor=f"agent:{agent.slug}", agent_id=agent.pk)
        counts.setdefault("sessions", 0)
        counts["mentions"] = mentions_counts(counts)  # type: ignore[assignment]
        return Response(UserForgetOut({"user_id": user_id, "mode": data["mode"], "counts": counts}).data)


def _holds_refuse(*, agent_id: int, actor: str, user_id: str, held: list[int]) -> None:
    """409 `legal_hold` naming the holds in force on the person or her threads in this agent (read
    under her erasure lock), before anything changes; the refusal audited with the hold ids only
    (no person, no pseudonym: it makes no key of hers)."""
    if not held:
        return
    with transaction.atomic():
        audit_append(
            action="person.erase.blocked",
            actor=actor,
            agent_id=agent_id,
            subject=f"{len(held)} holds",
            outcome="blocked",
            details={"holds": held},
        )
    raise Conflict(
        "legal_hold",
        f"Not erased: legal hold{'s' if len(held) > 1 else ''} "
        + ", ".join(f"#{i}" for i in held)
        + " keep this person's data in this agent; nothing was changed. Ask again once lifted.",
        field="user_id",
        details={"user_id": user_id, "holds": held},
    )
