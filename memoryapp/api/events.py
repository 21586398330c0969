"""Change events over the agent API: GET /events (Server-Sent Events) and GET /events/page (JSON).

Both read the key's agent's stream only: another agent's events are never in it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import renderers, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import IsoDateTimeField, OutputSerializer, StrictSerializer, validated
from memoryapp.api.errors import ErrorOut, error_body
from memoryapp.errors import DomainError
from memoryapp.events.selectors import MAX_BATCH, event_json, events_after, events_last_seq, events_missed
from memoryapp.events.services import EVENT_TYPES
from memoryapp.events.stream import STREAM_SLOTS, HeldStream, event_frames

EVENT_TYPE_NAMES = tuple(EVENT_TYPES)


class EventStreamRenderer(renderers.BaseRenderer):
    """Lets a client that accepts only text/event-stream (EventSource does) reach the view."""

    media_type = "text/event-stream"
    format = "event-stream"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return renderers.JSONRenderer().render(data)


def _types(raw: str | None) -> list[str] | None:
    if not raw:
        return None
    wanted = [t.strip() for t in raw.split(",") if t.strip()]
    unknown = [t for t in wanted if t not in EVENT_TYPES]
    if unknown:
        raise DomainError(
            "invalid_value", f"Unknown event type {unknown[0]!r}: one of {', '.join(EVENT_TYPES)}.", field="types"
        )
    return wanted or None


def _position(raw: str, field: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0 or value >= 2**62:
        raise DomainError("invalid_value", f"{field} must be an event's seq (a whole number, 0 or more).", field=field)
    return value


class EventsQuery(StrictSerializer):
    after = serializers.IntegerField(
        required=False, min_value=0, help_text="Start after this seq (Last-Event-ID takes precedence)."
    )
    types = serializers.CharField(
        required=False, help_text=f"Only these types, comma separated: {', '.join(EVENT_TYPES)}."
    )
    max_seconds = serializers.FloatField(
        required=False, min_value=0, help_text="Close the stream sooner than the service would (EVENTS_STREAM_SECONDS)."
    )


EVENT_STREAM_DESCRIPTION = (
    "Server-Sent Events, one per change of the agent's memory, in commit order: `id: <seq>`, `event: <type>`, "
    '`data: {"seq", "type", "ids", "thread_id"?, "at"}` (ids only, never content). The stream starts after '
    "Last-Event-ID (else `after`, else the newest event), sends `event: gap` with `{from_seq, to_seq}` when "
    "retention deleted events the client had not read, comments as keep-alives, and closes after "
    "EVENTS_STREAM_SECONDS with a `retry:` hint: reconnect with Last-Event-ID to go on without loss or repeat."
)


def stream_opened(*, agent_id: int, frames: Callable[[], Iterator[str]]) -> Any:
    """A Server-Sent Events response of `frames()` holding one of the process's stream slots until it
    is closed; 429 when the agent holds its share of them, 503 when the process has none left (both
    with Retry-After). The change events' stream and a run's events share the slots."""
    taken = STREAM_SLOTS.take(agent_id)
    if taken == STREAM_SLOTS.AGENT_FULL:
        # The agent's share of the process's streams: the other agents keep theirs.
        response = Response(
            error_body(
                "too_many_streams_for_agent",
                f"This agent holds {settings.EVENTS_MAX_STREAMS_PER_AGENT} event stream(s) of this process "
                "already; close one or retry in a moment.",
            ),
            status=429,
        )
        response["Retry-After"] = "1"
        return response
    if taken == STREAM_SLOTS.PROCESS_FULL:
        response = Response(
            error_body(
                "too_many_streams",
                f"This process serves {settings.EVENTS_MAX_STREAMS} event streams already; retry in a moment.",
            ),
            status=503,
        )
        response["Retry-After"] = "1"
        return response
    try:
        stream = StreamingHttpResponse(
            HeldStream(frames(), agent_id=agent_id), content_type="text/event-stream; charset=utf-8"
        )
    except BaseException:
        STREAM_SLOTS.give_back(agent_id)
        raise
    stream["Cache-Control"] = "no-cache"
    stream["X-Accel-Buffering"] = "no"  # a proxy in front must not hold frames back
    return stream


class StreamView(APIView):
    """A view answering Server-Sent Events: reachable by a client that accepts only
    text/event-stream (EventSource), its errors JSON whatever the client accepted."""

    renderer_classes = [renderers.JSONRenderer, EventStreamRenderer]

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        # Errors are JSON, whatever the client accepted (EventSource accepts only the stream).
        if isinstance(response, Response):
            request.accepted_renderer = renderers.JSONRenderer()
            request.accepted_media_type = "application/json"
        return super().finalize_response(request, response, *args, **kwargs)


class EventsStreamView(StreamView):
    """GET: the agent's change events as Server-Sent Events (text/event-stream)."""

    @extend_schema(
        parameters=[
            EventsQuery,
            OpenApiParameter(
                "Last-Event-ID",
                OpenApiTypes.INT,
                location=OpenApiParameter.HEADER,
                description="The seq of the last event read: the stream goes on after it (EventSource sends it).",
            ),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description=EVENT_STREAM_DESCRIPTION),
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
    def get(self, request: Request) -> Any:
        agent = request_agent(request)
        query = validated(EventsQuery, request.query_params)
        after: int | None = query.get("after")
        header = request.headers.get("Last-Event-ID")
        if header is not None and header.strip():
            after = _position(header.strip(), "Last-Event-ID")
        types = _types(query.get("types"))
        limit = settings.EVENTS_STREAM_SECONDS
        seconds = min(limit, query["max_seconds"]) if "max_seconds" in query else limit
        return stream_opened(
            agent_id=agent.pk, frames=lambda: event_frames(agent_id=agent.pk, after=after, types=types, seconds=seconds)
        )


class EventsPageQuery(StrictSerializer):
    after = serializers.IntegerField(required=False, min_value=0, default=0, help_text="Events after this seq.")
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_BATCH, default=100)
    types = serializers.CharField(required=False, help_text="Only these types, comma separated.")


class EventOut(OutputSerializer):
    seq = serializers.IntegerField(help_text="The event's place in the agent's stream: 1, 2, 3 ... in commit order.")
    type = serializers.ChoiceField(choices=EVENT_TYPE_NAMES)
    ids = serializers.ListField(child=serializers.CharField(), help_text="What it touched (the type says what).")
    thread_id = serializers.CharField(required=False, help_text="The thread, when the change is about one.")
    at = IsoDateTimeField(allow_null=True, help_text="When its transaction committed.")


class MissedOut(OutputSerializer):
    from_seq = serializers.IntegerField()
    to_seq = serializers.IntegerField()


class EventPageOut(OutputSerializer):
    results = EventOut(many=True, help_text="Oldest first.")
    next_after = serializers.IntegerField(help_text="Ask again with after= this (the last seq read, or after).")
    last_seq = serializers.IntegerField(help_text="The newest event's seq now.")
    missed = MissedOut(required=False, help_text="Events after `after` that retention deleted before they were read.")


class EventsPageView(APIView):
    """GET: the agent's change events after a seq, as a JSON page (for clients that poll)."""

    @extend_schema(parameters=[EventsPageQuery], responses={200: EventPageOut})
    def get(self, request: Request) -> Response:
        agent = request_agent(request)
        query = validated(EventsPageQuery, request.query_params)
        after = query["after"]
        rows = events_after(agent_id=agent.pk, after=after, limit=query["limit"], types=_types(query.get("types")))
        body: dict[str, Any] = {
            "results": [event_json(row) for row in rows],
            "next_after": rows[-1].seq if rows else after,
            "last_seq": events_last_seq(agent_id=agent.pk),
        }
        missed = events_missed(agent_id=agent.pk, after=after)
        if missed is not None:
            body["missed"] = missed.as_json()
        return Response(body)
