"""Busy threads over the agent API (002 `onBusy`): POST /threads/{id}/runs starts a run,
GET /threads/{id}/runs/{run_id} reads it, POST .../finish finishes it. A write to the thread that
carries the run in its `X-Run-Id` header is refused (409 `run_ended`) once the run was
interrupted or expired (memoryapp.threads.runs)."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import IsoDateTimeField, OutputSerializer, StrictSerializer, validated
from memoryapp.errors import DomainError
from memoryapp.models import ThreadRun
from memoryapp.models.choices import OnBusy
from memoryapp.threads.runs import busy_policy, run_finish, run_for_agent, run_start
from memoryapp.threads.selectors import thread_for_agent

# The header a write names its run by.
RUN_HEADER = "X-Run-Id"
# A run's id as the service makes it (`run_` and base32), at most 40 characters.
RUN_ID_SHAPE = re.compile(r"[A-Za-z0-9_.:~+@-]{1,40}")


def request_run_id(request: Request) -> str | None:
    """The run a write says it belongs to (its X-Run-Id), or None."""
    raw = request.headers.get(RUN_HEADER)
    if raw is None:
        return None
    run_id = raw.strip()
    if not RUN_ID_SHAPE.fullmatch(run_id):
        raise DomainError("invalid_value", f"{RUN_HEADER} must name a run.", field=RUN_HEADER)
    return run_id


class RunOut(OutputSerializer):
    id = serializers.CharField()
    thread_id = serializers.CharField()
    status = serializers.ChoiceField(choices=ThreadRun.Status.choices)
    started_at = IsoDateTimeField()
    expires_at = IsoDateTimeField(
        help_text="Until when the run holds the thread if nothing more is heard of it (each write with its X-Run-Id moves it on)."
    )
    ended_at = IsoDateTimeField(required=False, help_text="When it finished, was interrupted or expired.")
    ended_by = serializers.CharField(required=False, help_text="The run that interrupted it.")
    on_busy = serializers.ChoiceField(choices=OnBusy.choices, help_text="The thread's busy policy in force.")
    busy_timeout_seconds = serializers.IntegerField()


def run_json(run: ThreadRun, *, thread_id: str, on_busy: str, timeout: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": run.id,
        "thread_id": thread_id,
        "status": run.status,
        "started_at": run.started_at.isoformat(),
        "expires_at": run.expires_at.isoformat(),
        "on_busy": on_busy,
        "busy_timeout_seconds": timeout,
    }
    if run.ended_at is not None:
        body["ended_at"] = run.ended_at.isoformat()
    if run.ended_by:
        body["ended_by"] = run.ended_by
    return body


class RunStartInput(StrictSerializer):
    """No fields: the thread's (or its agent's) busy policy decides what a busy thread does."""


def _actor(request: Request) -> str:
    return f"agent:{request_agent(request).slug}"


class ThreadRunsView(APIView):
    @extend_schema(
        request=RunStartInput,
        responses={201: OpenApiResponse(RunOut, description="The run started: it holds the thread.")},
        description=(
            "Start a run on the thread. When another run holds it, the thread's `on_busy` decides: `wait` (up to "
            "`busy_timeout_seconds`), `reject`, or `interrupt` it; a refusal is a 409 `thread_busy` naming the run."
        ),
    )
    def post(self, request: Request, thread_id: str) -> Response:
        agent = request_agent(request)
        thread = thread_for_agent(agent=agent, external_id=thread_id)
        validated(RunStartInput, request.data if request.data else {})
        run = run_start(thread=thread, agent=agent, actor=_actor(request))
        mode, timeout = busy_policy(thread, agent)
        return Response(
            run_json(run, thread_id=thread.external_id, on_busy=mode, timeout=timeout), status=status.HTTP_201_CREATED
        )


class ThreadRunView(APIView):
    @extend_schema(responses={200: RunOut})
    def get(self, request: Request, thread_id: str, run_id: str) -> Response:
        agent = request_agent(request)
        thread = thread_for_agent(agent=agent, external_id=thread_id)
        run = run_for_agent(agent=agent, thread=thread, run_id=run_id)
        mode, timeout = busy_policy(thread, agent)
        return Response(run_json(run, thread_id=thread.external_id, on_busy=mode, timeout=timeout))


class ThreadRunFinishView(APIView):
    @extend_schema(
        request=None,
        responses={200: RunOut},
        description="Finish the run (again: the same answer); 409 `run_ended` when it was interrupted or expired.",
    )
    def post(self, request: Request, thread_id: str, run_id: str) -> Response:
        agent = request_agent(request)
        thread = thread_for_agent(agent=agent, external_id=thread_id)
        run = run_finish(agent=agent, thread=thread, run_id=run_id, actor=_actor(request))
        mode, timeout = busy_policy(thread, agent)
        return Response(run_json(run, thread_id=thread.external_id, on_busy=mode, timeout=timeout))
