"""Channel sessions over the agent API (004 `SessionManager`): POST /sessions gets or creates the
session of a channel conversation (and its thread), GET /sessions lists them newest first,
GET /sessions/{id} reads one, POST /sessions/{id}/close and /reopen change its status (actions,
as a run's /finish and a thread's /rewind are). Every session is reached by the key's agent only."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import IsoDateTimeField, OutputSerializer, PersonIdField, StrictSerializer, validated
from memoryapp.api.compaction import AutoCompactionOut, _auto_json
from memoryapp.api.threads import ThreadOut, _limit_field, _page_url, thread_json
from memoryapp.compaction.auto import thread_auto_compaction
from memoryapp.models import ChannelSession
from memoryapp.sessions.selectors import session_for_agent, sessions_list
from memoryapp.sessions.services import MAX_CHANNEL_ID, session_close, session_open, session_reopen

MAX_PAGE_LIMIT = 1000


def _actor(request: Request) -> str:
    return f"agent:{request_agent(request).slug}"


class SessionOut(OutputSerializer):
    id = serializers.CharField()
    user_id = serializers.CharField(help_text="The person of the channel conversation.")
    channel_type = serializers.CharField(help_text="The kind of channel: telegram, slack, web ...")
    channel_id = serializers.CharField(help_text="The conversation within the channel (a chat id ...).")
    status = serializers.ChoiceField(choices=ChannelSession.Status.choices)
    thread_id = serializers.CharField(help_text="The thread the conversation is stored in.")
    created_at = IsoDateTimeField()
    updated_at = IsoDateTimeField()
    closed_at = IsoDateTimeField(required=False, help_text="When it was closed (absent while active).")


def session_json(session: ChannelSession) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": session.id,
        "user_id": session.user_id,
        "channel_type": session.channel_type,
        "channel_id": session.channel_id,
        "status": session.status,
        "thread_id": session.thread.external_id,
        "created_at": session.created_at.isoformat(),
        "updated_at": session.updated_at.isoformat(),
    }
    if session.closed_at is not None:
        body["closed_at"] = session.closed_at.isoformat()
    return body


class SessionDetailOut(OutputSerializer):
    session = SessionOut()
    thread = ThreadOut()
    compaction = AutoCompactionOut(
        help_text="The automatic compaction the session's thread gets: its agent's settings, with the thread's own over them."
    )


class SessionOpenedOut(SessionDetailOut):
    created = serializers.BooleanField(help_text="True when this call made the session (and its thread).")


def _detail(session: ChannelSession) -> dict[str, Any]:
    return {
        "session": session_json(session),
        "thread": thread_json(session.thread),
        "compaction": _auto_json(thread_auto_compaction(thread=session.thread)),
    }


class SessionOpenInput(StrictSerializer):
    user_id = PersonIdField(required=True, allow_blank=False, help_text="The person of the conversation.")
    channel_type = serializers.CharField(
        max_length=64, trim_whitespace=False, help_text="The kind of channel: 1 to 64 letters, digits or _ . : -."
    )
    channel_id = serializers.CharField(
        max_length=MAX_CHANNEL_ID, trim_whitespace=False, help_text="The conversation within the channel."
    )


class SessionsQuery(StrictSerializer):
    user_id = serializers.CharField(max_length=128, required=False, allow_blank=True)
    status = serializers.ChoiceField(choices=ChannelSession.Status.choices, required=False)
    limit = _limit_field(MAX_PAGE_LIMIT, 50)
    cursor = serializers.CharField(required=False, max_length=2000)


class SessionPageOut(OutputSerializer):
    results = SessionOut(many=True, help_text="Newest first.")
    next = serializers.URLField(allow_null=True, help_text="The URL of the next page (null on the last).")
    next_cursor = serializers.CharField(allow_null=True, help_text="The cursor of the next page (null on the last).")


class SessionsView(APIView):
    """POST: get or create the session of a channel conversation. GET: the sessions, newest first."""

    @extend_schema(
        request=SessionOpenInput,
        responses={
            200: OpenApiResponse(SessionOpenedOut, description="The channel's active session existed."),
            201: OpenApiResponse(SessionOpenedOut, description="A new session, on a new thread."),
        },
        description=(
            "Get or create the active session of (user_id, channel_type, channel_id) for the key's agent: "
            "its thread, and whether this call made it. Concurrent calls for one conversation make one "
            "session and one thread."
        ),
    )
    def post(self, request: Request) -> Response:
        agent = request_agent(request)
        data = validated(SessionOpenInput, request.data)
        opened = session_open(
            agent=agent,
            user_id=data["user_id"],
            channel_type=data["channel_type"],
            channel_id=data["channel_id"],
            actor=_actor(request),
        )
        body = {**_detail(opened.session), "created": opened.created}
        return Response(body, status=status.HTTP_201_CREATED if opened.created else status.HTTP_200_OK)

    @extend_schema(operation_id="v1_sessions_list", parameters=[SessionsQuery], responses={200: SessionPageOut})
    def get(self, request: Request) -> Response:
        agent = request_agent(request)
        query = validated(SessionsQuery, request.query_params.dict())
        page = sessions_list(
            agent=agent,
            user_id=query.get("user_id"),
            status=query.get("status"),
            limit=query["limit"],
            cursor=query.get("cursor"),
        )
        return Response(
            {
                "results": [session_json(s) for s in page.results],
                "next": _page_url(request, cursor=page.next_cursor) if page.next_cursor else None,
                "next_cursor": page.next_cursor,
            }
        )


class SessionView(APIView):
    @extend_schema(responses={200: SessionDetailOut})
    def get(self, request: Request, session_id: str) -> Response:
        session = session_for_agent(agent=request_agent(request), session_id=session_id)
        return Response(_detail(session))


class SessionCloseView(APIView):
    @extend_schema(
        request=None,
        responses={200: SessionDetailOut},
        description="Close the session (again: the same answer). Its thread stays; the channel's next "
        "get-or-create opens a new session on a new thread.",
    )
    def post(self, request: Request, session_id: str) -> Response:
        session = session_close(agent=request_agent(request), session_id=session_id, actor=_actor(request))
        return Response(_detail(session))


class SessionReopenView(APIView):
    @extend_schema(
        request=None,
        responses={200: SessionDetailOut},
        description="Make a closed session its channel's active one again; 409 `session_active` when "
        "another session of the channel is active.",
    )
    def post(self, request: Request, session_id: str) -> Response:
        session = session_reopen(agent=request_agent(request), session_id=session_id, actor=_actor(request))
        return Response(_detail(session))
