"""Busy threads over the agent API (002 `onBusy`): POST /threads/{id}/runs starts a run,
GET /threads/{id}/runs/{run_id} reads it, POST .../finish finishes it. A write to the thread that
carries the run in its `X-Run-Id` header is refused (409 `run_ended`) once the run was
interrupted or expired (memoryapp.threads.runs)."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import renderers, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import IsoDateTimeField, OutputSerializer, StrictSerializer, validated
from memoryapp.api.errors import ErrorOut
from memoryapp.api.events import StreamView, _position, stream_opened
from memoryapp.errors import DomainError
from memoryapp.ledger.services import KINDS, MAX_BATCH, events_check, ledger_publish
from memoryapp.ledger.stream import run_event_frames
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


# --- the run's event ledger (000 RunLedger, SnapshotAccumulator) -------------------------------------


class RunEventsQuery(StrictSerializer):
    after = serializers.IntegerField(
        required=False,
        min_value=0,
        help_text="Start after this event's seq (Last-Event-ID takes precedence; default 0).",
    )
    max_seconds = serializers.FloatField(
        required=False, min_value=0, help_text="Close the stream sooner than the service would (EVENTS_STREAM_SECONDS)."
    )


class RunEventIn(serializers.Serializer):
    """One event, as 000's RunEvent: its `kind` and that kind's fields."""

    kind = serializers.ChoiceField(choices=KINDS)
    delta = serializers.CharField(required=False, help_text="text_delta, thinking_delta: the text streamed.")
    id = serializers.CharField(required=False, help_text="tool_started, tool_finished: the tool call's id.")
    name = serializers.CharField(required=False, help_text="tool_started, tool_finished: the tool's name.")
    outcome = serializers.JSONField(required=False, help_text="tool_finished: what the tool answered (any JSON).")
    error = serializers.JSONField(required=False, help_text="faulted: the run's error (an object or a text).")
    snapshot = serializers.JSONField(
        required=False,
        help_text="snapshot, settled, faulted: the run's state (000 RunSnapshot: runId, sessionId, phase, messages, "
        "pending, usageTotal, model, error?). The latest replaces the run's snapshot.",
    )


class RunEventsInput(serializers.Serializer):
    events = RunEventIn(many=True, help_text=f"1 to {MAX_BATCH} events, in order (a single event object is taken too).")


class RunEventOut(OutputSerializer):
    seq = serializers.IntegerField(help_text="Its place in the run: 1, 2, 3 ...")
    kind = serializers.ChoiceField(choices=KINDS)


class RunEventsPublishedOut(OutputSerializer):
    run_id = serializers.CharField()
    events = RunEventOut(many=True, help_text="The events written, with their numbers.")
    last_seq = serializers.IntegerField(help_text="The run's newest event.")
    outcome = serializers.CharField(
        allow_blank=True, help_text="'' while the ledger takes events; settled or faulted once it ended."
    )


class RunSnapshotOut(OutputSerializer):
    run_id = serializers.CharField()
    thread_id = serializers.CharField()
    snapshot = serializers.JSONField(
        allow_null=True, help_text="The latest snapshot an event carried (000 RunSnapshot); null before the first."
    )
    snapshot_seq = serializers.IntegerField(allow_null=True, help_text="The event that carried it.")
    last_seq = serializers.IntegerField(help_text="The run's newest event.")
    outcome = serializers.CharField(allow_blank=True, help_text="'' while the ledger takes events; settled or faulted.")


RUN_EVENTS_DESCRIPTION = (
    'Server-Sent Events, the run\'s events in order: `id: <seq>`, `event: <kind>`, `data: {"seq", "kind", "at", '
    "...the kind's fields}`. The stream starts after Last-Event-ID (else `after`, else 0), sends `event: gap` with "
    "`{from_seq, to_seq}` for deltas the bounded window (RUN_EVENTS_WINDOW) deleted before they were read, "
    "comments as keep-alives, and ends after `settled` or `faulted`, or after EVENTS_STREAM_SECONDS with a `retry:` "
    "hint: reconnect with Last-Event-ID to go on without loss or repeat."
)


class ThreadRunEventsView(StreamView):
    """POST: publish events of the run. GET: follow them (Server-Sent Events)."""

    def get_renderers(self) -> list[renderers.BaseRenderer]:
        # Only the stream speaks text/event-stream: a publish answers JSON.
        request = getattr(self, "request", None)
        if request is not None and request.method != "GET":
            return [renderers.JSONRenderer()]
        return super().get_renderers()

    @extend_schema(
        request=RunEventsInput,
        responses={
            201: OpenApiResponse(RunEventsPublishedOut, description="Written, in order, after the run's last event."),
            409: OpenApiResponse(ErrorOut, description="`run_settled`: the run's ledger ended (settled or faulted)."),
            413: OpenApiResponse(ErrorOut, description=f"More than {MAX_BATCH} events in one batch."),
        },
        description=(
            "Publish a batch of the run's events (000 RunEvent: text_delta, thinking_delta, tool_started, "
            "tool_finished, snapshot, settled, faulted), numbered in order after the run's last. An event that carries "
            "a snapshot (snapshot, settled, faulted) replaces the run's snapshot; settled or faulted ends the ledger "
            "(what follows is a 409 `run_settled`, the batch written whole or not at all)."
        ),
    )
    def post(self, request: Request, thread_id: str, run_id: str) -> Response:
        agent = request_agent(request)
        thread = thread_for_agent(agent=agent, external_id=thread_id)
        run_for_agent(agent=agent, thread=thread, run_id=run_id)  # 404 before the body is judged
        events = events_check(request.data)
        published = ledger_publish(agent=agent, thread=thread, run_id=run_id, events=events, actor=_actor(request))
        body = {
            "run_id": published.run.id,
            "events": [{"seq": row.seq, "kind": row.kind} for row in published.events],
            "last_seq": published.run.ledger_seq,
            "outcome": published.run.ledger_outcome,
        }
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            RunEventsQuery,
            OpenApiParameter(
                "Last-Event-ID",
                OpenApiTypes.INT,
                location=OpenApiParameter.HEADER,
                description="The seq of the last event read: the stream goes on after it (EventSource sends it).",
            ),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description=RUN_EVENTS_DESCRIPTION),
            429: OpenApiResponse(
                ErrorOut,
                description="The agent holds EVENTS_MAX_STREAMS_PER_AGENT streams of this process already: "
                "retry after Retry-After.",
            ),
            503: OpenApiResponse(
                ErrorOut, description="This process serves EVENTS_MAX_STREAMS streams already: retry after Retry-After."
            ),
        },
    )
    def get(self, request: Request, thread_id: str, run_id: str) -> Any:
        agent = request_agent(request)
        thread = thread_for_agent(agent=agent, external_id=thread_id)
        run = run_for_agent(agent=agent, thread=thread, run_id=run_id)
        query = validated(RunEventsQuery, request.query_params)
        after: int = query.get("after", 0)
        header = request.headers.get("Last-Event-ID")
        if header is not None and header.strip():
            after = _position(header.strip(), "Last-Event-ID")
        limit = settings.EVENTS_STREAM_SECONDS
        seconds = min(limit, query["max_seconds"]) if "max_seconds" in query else limit
        return stream_opened(agent_id=agent.pk, frames=lambda: run_event_frames(run=run, after=after, seconds=seconds))


class ThreadRunSnapshotView(APIView):
    @extend_schema(
        responses={200: RunSnapshotOut},
        description="The run's latest snapshot (000 SnapshotAccumulator: events carrying one replace it, deltas "
        "and tool events do not), kept after the run settles, deleted with the run.",
    )
    def get(self, request: Request, thread_id: str, run_id: str) -> Response:
        agent = request_agent(request)
        thread = thread_for_agent(agent=agent, external_id=thread_id)
        run = run_for_agent(agent=agent, thread=thread, run_id=run_id)
        return Response(
            {
                "run_id": run.id,
                "thread_id": thread.external_id,
                "snapshot": run.snapshot,
                "snapshot_seq": run.snapshot_seq,
                "last_seq": run.ledger_seq,
                "outcome": run.ledger_outcome,
            }
        )
