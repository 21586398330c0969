"""The agent API of threads and entries: thin views over the thread services and selectors.

Each view: an input serializer that validates, one service or selector call, an output shape.
Every thread and entry is reached through `thread_for_agent` / `entry_for_agent`, so another
agent's objects answer the same 404 as missing ones.
"""

from __future__ import annotations

import io
import json
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, set_rollback

from memoryapp.api.auth import FOUND_ATTRIBUTE, RATE_ATTRIBUTE, request_agent
from memoryapp.api.base import (
    IsoDateTimeField,
    JsonObjectField,
    OutputSerializer,
    PersonIdField,
    StrictSerializer,
    validated,
)
from memoryapp.api.errors import exception_handler
from memoryapp.api.parsers import JSONParser
from memoryapp.api.runs import RUN_HEADER, request_run_id
from memoryapp.errors import DomainError, NotFound
from memoryapp.forgetting.services import entry_delete, entry_redact, thread_delete, thread_rewind_stale
from memoryapp.models import Entry, Thread
from memoryapp.models.choices import HISTORY_TYPES, EntryType, OnBusy, Role
from memoryapp.storable import storable_text_check, time_in_range
from memoryapp.threads.runs import MAX_BUSY_TIMEOUT_SECONDS, run_holding, thread_busy_policy_set
from memoryapp.threads.selectors import (
    entries_list,
    entry_for_agent,
    path_entries,
    thread_for_agent,
    threads_list,
)
from memoryapp.threads.services import (
    entry_was_there,
    thread_append,
    thread_append_one,
    thread_checkout,
    thread_create,
    thread_fork,
    thread_update,
)
from memoryapp.threads.transfer import thread_export_lines, thread_import_lines
from memoryapp.threads.validation import MAX_BATCH_ENTRIES

# A request body of the entries endpoint holds at most this many bytes (a batch of 1,000
# typical entries fits many times over; one entry is at most 1 MiB of JSON).
MAX_REQUEST_BYTES = 32 * 1024 * 1024
MAX_PATH_LIMIT = 1000
MAX_PAGE_LIMIT = 1000


def _actor(request: Request) -> str:
    return f"agent:{request_agent(request).slug}"


def _check_body_size(request: Request) -> None:
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_REQUEST_BYTES:
        raise DomainError("request_too_large", f"A request body holds at most {MAX_REQUEST_BYTES} bytes.", status=413)


# --- output serializers --------------------------------------------------------------------


class ThreadOut(OutputSerializer):
    """A thread as agents see it: declared here, rendered by `thread_json`."""

    id = serializers.CharField(source="external_id", help_text="The thread's id (the client's own, or generated).")
    user_id = serializers.CharField(help_text="The person the thread is about ('' when none).")
    metadata = JsonObjectField()
    active_leaf_id = serializers.CharField(
        allow_null=True, help_text="The entry new entries go under (null for an empty thread)."
    )
    forked_from = serializers.CharField(
        source="forked_from.external_id", allow_null=True, help_text="The thread this one was forked from."
    )
    created_at = IsoDateTimeField()
    updated_at = IsoDateTimeField(help_text="Changed when the thread is created or its metadata or user_id change.")
    on_busy = serializers.ChoiceField(
        choices=OnBusy.choices, required=False, help_text="The thread's own busy policy (absent: its agent's)."
    )
    busy_timeout_seconds = serializers.IntegerField(
        required=False, help_text="The thread's own busy timeout (absent: its agent's)."
    )


def thread_json(thread: Thread) -> dict[str, Any]:
    """A thread as `ThreadOut` declares it, built by hand: lists answer up to 1,000 threads, and
    a DRF serializer costs about ten times as much (see EntryOut)."""
    forked_from = thread.forked_from.external_id if thread.forked_from_id and thread.forked_from else None
    body: dict[str, Any] = {
        "id": thread.external_id,
        "user_id": thread.user_id,
        "metadata": thread.metadata or {},
        "active_leaf_id": thread.active_leaf_id,
        "forked_from": forked_from,
        "created_at": thread.created_at.isoformat() if thread.created_at else None,
        "updated_at": thread.updated_at.isoformat() if thread.updated_at else None,
    }
    if thread.on_busy:
        body["on_busy"] = thread.on_busy
    if thread.busy_timeout_seconds:
        body["busy_timeout_seconds"] = thread.busy_timeout_seconds
    return body


class ThreadPageOut(OutputSerializer):
    results = ThreadOut(many=True)
    next = serializers.URLField(allow_null=True, help_text="The URL of the next page (null on the last).")
    next_cursor = serializers.CharField(allow_null=True, help_text="The cursor of the next page (null on the last).")


class ToolCallOut(OutputSerializer):
    id = serializers.CharField()
    name = serializers.CharField()
    arguments = serializers.JSONField(help_text="The arguments the model gave (any JSON).")


class EntryOut(OutputSerializer):
    """An entry as agents see it; fields never set are absent rather than null (004).

    Declared here, rendered by `entry_json`: entries are the hot path (a batch of 1,000, pages
    of 10,000), and a DRF serializer costs tens of microseconds an entry where the dict costs
    a few. tests/test_api_schema.py checks every entry the API answers against this declaration.
    """

    id = serializers.CharField()
    thread_id = serializers.CharField()
    parent_id = serializers.CharField(allow_null=True, help_text="null for the first entry of the thread.")
    seq = serializers.IntegerField(help_text="Strictly increasing within the thread.")
    type = serializers.ChoiceField(choices=EntryType.choices)
    role = serializers.ChoiceField(choices=Role.choices, allow_blank=True, help_text="'' for an event.")
    content = serializers.JSONField(
        allow_null=True, help_text="Text, or a list of content blocks; null for an event (see `event`)."
    )
    token_count = serializers.IntegerField()
    metadata = JsonObjectField()
    created_at = IsoDateTimeField()
    content_hash = serializers.CharField(help_text="000's hashNode of the entry as stored.")
    tool_calls = ToolCallOut(many=True, required=False, help_text="An assistant message's tool calls.")
    tool_call_id = serializers.CharField(required=False, help_text="The call a tool result answers.")
    tool_name = serializers.CharField(required=False)
    sender_name = serializers.CharField(required=False)
    event = JsonObjectField(required=False, help_text="An event's payload (compaction, label, ...).")
    redacted_at = IsoDateTimeField(required=False, help_text="When the entry was redacted (its content replaced).")


def entry_json(entry: Entry, thread_id: str) -> dict[str, Any]:
    """An entry as `EntryOut` declares it, built by hand for speed (see EntryOut)."""
    body: dict[str, Any] = {
        "id": entry.id,
        "thread_id": thread_id,
        "parent_id": entry.parent_id,
        "seq": entry.seq,
        "type": entry.type,
        "role": entry.role,
        "content": entry.content,
        "token_count": entry.token_count,
        "metadata": entry.metadata or {},
        "created_at": entry.created_at.isoformat(),
        "content_hash": entry.content_hash,
    }
    if entry.tool_calls:
        body["tool_calls"] = entry.tool_calls
    if entry.tool_call_id:
        body["tool_call_id"] = entry.tool_call_id
    if entry.tool_name:
        body["tool_name"] = entry.tool_name
    if entry.sender_name:
        body["sender_name"] = entry.sender_name
    if entry.event is not None:
        body["event"] = entry.event
    if entry.redacted_at is not None:
        body["redacted_at"] = entry.redacted_at.isoformat()
    return body


# A text as JSON the way the API's renderer writes it (DRF's JSONRenderer: UNICODE_JSON, non-ASCII as
# it is; \u2028 and \u2029 escaped after, over the whole answer).
_json_text = json.encoder.encode_basestring  # type: ignore[attr-defined]


def _plain_entry_json(entry: Entry, thread_text: str, created_text: str) -> str | None:
    """`entry_json(entry, ...)` as the renderer writes it (compact, keys in its order), for an entry
    with none of the optional keys and a text content, `thread_text` and `created_text` already JSON;
    None for any other entry (its answer is then rendered from `entry_json`)."""
    content, token_count = entry.content, entry.token_count
    if (
        type(content) is not str
        or entry.metadata
        or entry.tool_calls
        or entry.tool_call_id
        or entry.tool_name
        or entry.sender_name
        or entry.event is not None
        or entry.redacted_at is not None
        or (token_count is not None and type(token_count) is not int)
    ):
        return None
    parent = entry.parent_id
    return (
        f'{{"id":{_json_text(entry.id)},"thread_id":{thread_text},'
        f'"parent_id":{"null" if parent is None else _json_text(parent)},"seq":{int(entry.seq)},'
        f'"type":{_json_text(entry.type)},"role":{_json_text(entry.role)},"content":{_json_text(content)},'
        f'"token_count":{"null" if token_count is None else token_count},"metadata":{{}},'
        f'"created_at":{created_text},"content_hash":{_json_text(entry.content_hash)}}}'
    )


def batch_added_json(entries: list[Entry], thread_id: str, active_leaf_id: str | None) -> bytes:
    """The answer to a batch append, `{"entries": [entry_json(e) ...], "active_leaf_id": ...}`, as the
    API's JSON renderer writes it, byte for byte (tests/api/test_batch_answer.py). Its entries are
    mostly plain turns of one creation time: each written out, the time's text made once; dicts built
    and dumped, ~0.9 ms of a 9.5 ms batch of 100 (issue 26), was the largest part of its answer."""
    thread_text = _json_text(thread_id)
    times: dict[tuple[Any, Any], str] = {}
    parts = []
    for entry in entries:
        created = entry.created_at
        # Keyed by the offset too: two times of one instant are equal, their texts are not.
        when = (created, created.utcoffset())
        created_text = times.get(when)
        if created_text is None:
            created_text = times[when] = _json_text(created.isoformat())
        part = _plain_entry_json(entry, thread_text, created_text)
        if part is None:
            part = _RENDERER.render(entry_json(entry, thread_id)).decode()
        parts.append(part)
    leaf = "null" if active_leaf_id is None else _json_text(active_leaf_id)
    text = f'{{"entries":[{",".join(parts)}],"active_leaf_id":{leaf}}}'
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()


class EntryBatchOut(OutputSerializer):
    entries = EntryOut(many=True)
    active_leaf_id = serializers.CharField(allow_null=True)


ENTRIES_ADDED = PolymorphicProxySerializer(
    component_name="EntriesAdded",
    serializers=[EntryOut, EntryBatchOut],
    resource_type_field_name=None,
    many=False,
)


class EntryPageOut(OutputSerializer):
    results = EntryOut(many=True, help_text="Oldest first.")
    next = serializers.URLField(allow_null=True, help_text="The URL of the page of older entries (null: none).")


class PathPageOut(OutputSerializer):
    results = EntryOut(many=True, help_text="The branch, oldest first.")
    leaf_id = serializers.CharField(allow_null=True, help_text="The leaf the branch ends at.")
    next = serializers.URLField(allow_null=True, help_text="The URL of the page of older entries (null: none).")


def _page_url(request: Request, **changes: Any) -> str:
    params = {k: v for k, v in request.query_params.items()}
    params.update({k: str(v) for k, v in changes.items()})
    return request.build_absolute_uri(request.path) + "?" + urlencode(params)


# --- input serializers ---------------------------------------------------------------------


class ThreadCreateInput(StrictSerializer):
    id = serializers.CharField(max_length=128, required=False, allow_blank=False)
    user_id = PersonIdField(default="")
    metadata = serializers.DictField(required=False, default=dict)


class ThreadUpdateInput(StrictSerializer):
    metadata = serializers.DictField(required=False)
    user_id = PersonIdField()
    replace_metadata = serializers.BooleanField(required=False, default=False)
    on_busy = serializers.ChoiceField(
        choices=[*OnBusy.values, ""],
        required=False,
        allow_blank=True,
        help_text="002 onBusy for this thread: wait, reject or interrupt ('' : the agent's).",
    )
    busy_timeout_seconds = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_BUSY_TIMEOUT_SECONDS,
        help_text="002 busyTimeoutSecs for this thread (0: the agent's).",
    )


def _limit_field(maximum: int, default: int) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=1, max_value=maximum, required=False, default=default)


@extend_schema_field(OpenApiTypes.STR)
class TypesField(serializers.Field):
    """`types`: `all`, or a comma list of entry types (default: messages and tool results)."""

    def to_representation(self, value: Any) -> Any:
        return value

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            raise serializers.ValidationError("types must be 'all' or a comma list of entry types.")
        text = data.strip()
        if text == "all":
            return None
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in EntryType.values]
        if not names or unknown:
            raise serializers.ValidationError(
                f"Unknown entry type {unknown[0] if unknown else ''!r}: use 'all' or some of {EntryType.values}."
            )
        return names


class ThreadsQuery(StrictSerializer):
    user_id = serializers.CharField(max_length=128, required=False, allow_blank=True)
    metadata = serializers.JSONField(required=False, binary=True)
    updated_after = serializers.DateTimeField(required=False)
    updated_before = serializers.DateTimeField(required=False)
    limit = _limit_field(MAX_PAGE_LIMIT, 50)
    cursor = serializers.CharField(required=False, max_length=2000)

    def validate_metadata(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise serializers.ValidationError("metadata must be a JSON object of values to match.")
        # The query string is parsed here, not by the API's JSON parser: the same check of its text.
        storable_text_check(value, field="metadata")
        return value


class EntriesQuery(StrictSerializer):
    types = TypesField(required=False, default=[str(t) for t in HISTORY_TYPES])
    # 004 getEntries: the most recent `limit`, oldest first; 0 for all.
    limit = serializers.IntegerField(min_value=0, max_value=MAX_PAGE_LIMIT, required=False, default=50)
    cursor = serializers.CharField(required=False, max_length=2000)
    before = serializers.DateTimeField(required=False)
    after = serializers.DateTimeField(required=False)


class PathQuery(StrictSerializer):
    leaf = serializers.CharField(required=False, max_length=40)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_PATH_LIMIT, required=False)
    before = serializers.CharField(required=False, max_length=40)
    types = TypesField(required=False, default=[str(t) for t in HISTORY_TYPES])


ENTRY_FIELDS = {
    "type": str,
    "role": str,
    "content": object,
    "parent_id": str,
    "activate": bool,
    "tool_calls": list,
    "tool_call_id": str,
    "tool_name": str,
    "sender_name": str,
    "token_count": int,
    "event": dict,
    "metadata": dict,
    "created_at": str,
}


def entry_input(raw: Any, prefix: str = "") -> dict[str, Any]:
    """One entry of a request, its JSON types checked, as keyword arguments of `entry_add`.

    A plain function rather than a DRF serializer: a batch holds up to 1,000 entries, and a
    serializer per entry costs milliseconds each. The domain rules (roles per type, content
    shape, tool calls, sizes) are checked by the service, which names the same fields.
    """
    if not isinstance(raw, dict):
        raise DomainError("invalid_type", "An entry must be a JSON object.", field=prefix.rstrip(".") or None)
    spec: dict[str, Any] = {}
    for name, value in raw.items():
        kind = ENTRY_FIELDS.get(name)
        if kind is None:
            raise DomainError("unknown_field", f"{name}: Unknown field.", field=f"{prefix}{name}")
        if value is None:
            if name in ("activate", "type", "role", "tool_call_id", "tool_name", "sender_name", "metadata"):
                raise DomainError("null", f"{name} may not be null.", field=f"{prefix}{name}")
            spec[name] = None
            continue
        wrong = not isinstance(value, kind) or (kind is int and isinstance(value, bool))
        if wrong:
            expected = {str: "a string", bool: "true or false", list: "a list", dict: "an object", int: "an integer"}
            raise DomainError("invalid_type", f"{name} must be {expected.get(kind, 'valid')}.", field=f"{prefix}{name}")
        spec[name] = value
    if isinstance(spec.get("created_at"), str):
        try:
            # None when it is not shaped like a date-time; ValueError when it is but names no day (2020-02-30).
            at = parse_datetime(spec["created_at"])
        except ValueError:
            at = None
        if at is None:
            raise DomainError("invalid_value", "created_at must be an ISO 8601 date-time.", field=f"{prefix}created_at")
        spec["created_at"] = time_in_range(at, field=f"{prefix}created_at")
    return spec


class EntryIdInput(StrictSerializer):
    entry_id = serializers.CharField(max_length=40)


class ForkInput(StrictSerializer):
    entry_id = serializers.CharField(max_length=40)
    new_thread_id = serializers.CharField(max_length=128, required=False, allow_null=True, default=None)


class RedactInput(StrictSerializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    # 004 keepReplies: a user message takes its replies (up to the next user message) unless true.
    keep_replies = serializers.BooleanField(required=False, default=False)


class EntryDeleteQuery(StrictSerializer):
    keep_replies = serializers.BooleanField(required=False, default=False)


# --- views ---------------------------------------------------------------------------------


class ThreadsView(APIView):
    """POST: create a thread or update the one of that id. GET: list threads, newest updated first."""

    @extend_schema(
        request=ThreadCreateInput,
        responses={
            200: OpenApiResponse(ThreadOut, description="The thread of that id existed: updated."),
            201: OpenApiResponse(ThreadOut, description="A new thread."),
        },
    )
    def post(self, request: Request) -> Response:
        agent = request_agent(request)
        data = validated(ThreadCreateInput, request.data)
        existed = False
        if data.get("id"):
            try:
                thread_for_agent(agent=agent, external_id=data["id"])
                existed = True
            except NotFound:
                pass
        thread = thread_create(
            agent=agent,
            external_id=data.get("id"),
            user_id=data["user_id"],
            metadata=data["metadata"],
            actor=_actor(request),
        )
        return Response(thread_json(thread), status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED)

    @extend_schema(operation_id="v1_threads_list", parameters=[ThreadsQuery], responses={200: ThreadPageOut})
    def get(self, request: Request) -> Response:
        agent = request_agent(request)
        query = validated(ThreadsQuery, request.query_params.dict())
        page = threads_list(
            agent=agent,
            user_id=query.get("user_id"),
            metadata=query.get("metadata"),
            updated_after=query.get("updated_after"),
            updated_before=query.get("updated_before"),
            limit=query["limit"],
            cursor=query.get("cursor"),
        )
        return Response(
            {
                "results": [thread_json(t) for t in page.results],
                "next": _page_url(request, cursor=page.next_cursor) if page.next_cursor else None,
                "next_cursor": page.next_cursor,
            }
        )


class ThreadView(APIView):
    """GET, PATCH (metadata, user_id) and DELETE one thread."""

    @extend_schema(responses={200: ThreadOut})
    def get(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        return Response(thread_json(thread))

    @extend_schema(request=ThreadUpdateInput, responses={200: ThreadOut})
    def patch(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        data = validated(ThreadUpdateInput, request.data)
        with run_holding(agent=thread.agent, thread_external_id=thread_id, run_id=request_run_id(request)):
            busy = "on_busy" in data or "busy_timeout_seconds" in data
            if not busy or "metadata" in data or "user_id" in data:
                # (A change of the busy policy alone leaves updated_at: 004 moves it with metadata.)
                thread = thread_update(
                    thread=thread,
                    metadata=data.get("metadata"),
                    user_id=data.get("user_id"),
                    replace_metadata=data["replace_metadata"],
                    actor=_actor(request),
                )
            if busy:
                thread = thread_busy_policy_set(
                    thread=thread,
                    on_busy=data.get("on_busy"),
                    busy_timeout_seconds=data.get("busy_timeout_seconds"),
                    actor=_actor(request),
                )
        return Response(thread_json(thread))

    @extend_schema(responses={204: OpenApiResponse(description="Deleted, with its entries and what stood on them.")})
    def delete(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        thread_delete(thread=thread, actor=_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


def _added_status(entries: list[Entry]) -> int:
    """201 when the write added an entry; 200 when every one was there already (a retry)."""
    return status.HTTP_200_OK if all(entry_was_there(e) for e in entries) else status.HTTP_201_CREATED


# A single append's body is read by `_single_append` when it is at most this large (a plain turn is
# a few hundred bytes; Django's own bound on a body read whole, DATA_UPLOAD_MAX_MEMORY_SIZE, is far above).
SINGLE_APPEND_BODY_BYTES = 64 * 1024
_RUN_META = "HTTP_" + RUN_HEADER.upper().replace("-", "_")
# What DRF's content negotiation answers with the API's one renderer, without asking it.
_PLAIN_ACCEPT = frozenset({"", "*/*", "application/json"})
_RENDERER = JSONRenderer()


def _single_append(view: APIView, request: HttpRequest, thread_id: str) -> HttpResponseBase | None:
    """A single append without a run, answered without DRF's request handling (issue 26): None, the
    body unread or read and kept for DRF, when the request is anything else; DRF's view then answers it.

    What DRF's dispatch does for this request was done already or is done here the same way:
    1. the key was checked before the body was read (`KeyBeforeBodyMiddleware`, FOUND_ATTRIBUTE)
       and the same round trip took its rate token (RATE_ATTRIBUTE 0.0: `KeyRateThrottle` would let
       it through); the agent is the key's (`IsAgent`);
    2. a JSON body (`application/json`) no larger than SINGLE_APPEND_BODY_BYTES, parsed by the API's
       own parser; an answer in JSON (no Accept, or one the JSON renderer matches at once; no
       `format` override in the query);
    3. no X-Run-Id (a run's write waits for its run: `run_holding`) and no batch (`entries`);
    4. `thread_append_one` as the view calls it, its answer rendered by DRF's JSON renderer with the
       view's Allow header; any error through the API's exception handler, as DRF hands it over.
    Costs: DRF's Request, negotiation, parser and throttle lookups, Response and its rendering
    were ~0.3 ms of a single append's 2 ms in Django's handler (bench/handler_cpu.py)."""
    meta = request.META
    if getattr(request, RATE_ATTRIBUTE, None) != 0.0 or _RUN_META in meta:
        return None
    found = getattr(request, FOUND_ATTRIBUTE, None)
    if found is None or request.content_type != "application/json":
        return None
    if meta.get("HTTP_ACCEPT", "").strip() not in _PLAIN_ACCEPT or "format" in meta.get("QUERY_STRING", ""):
        return None
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if not 0 < length <= SINGLE_APPEND_BODY_BYTES:
        return None
    user = request.user = found[0]  # as DRF's authentication leaves it, before the body is parsed
    try:
        body = JSONParser().parse(io.BytesIO(request.body))
        if isinstance(body, dict) and "entries" in body:
            return None  # a batch: DRF's view reads the body kept (request.body)
        thread, created = thread_append_one(agent=user.agent, external_id=thread_id, spec=entry_input(body))
        data: Any = entry_json(created[0], thread.external_id)
        code = _added_status(created)
        headers: list[tuple[str, str]] = []
    except Exception as exc:
        answer = exception_handler(exc, {"view": view, "args": (), "kwargs": {"thread_id": thread_id}})
        if answer is None:
            raise
        set_rollback()
        data, code = answer.data, answer.status_code
        headers = [(name, value) for name, value in answer.items() if name.lower() != "content-type"]
    response = HttpResponse(_RENDERER.render(data), status=code, content_type=_RENDERER.media_type)
    response["Allow"] = ", ".join(view.allowed_methods)
    for name, value in headers:
        response[name] = value
    return response


class ThreadEntriesView(APIView):
    """POST: add one entry, or a batch `{"entries": [...]}`. GET: entries of every branch, paged.

    A single append without a run is answered by `_single_append`, the rest by DRF's view."""

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.method == "POST":
            answer = _single_append(self, request, kwargs["thread_id"])
            if answer is not None:
                return answer
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={
            201: OpenApiResponse(
                ENTRIES_ADDED, description="The entry added; for a batch, the entries added and the new active leaf."
            ),
            200: OpenApiResponse(
                ENTRIES_ADDED,
                description=(
                    "Nothing new: the entry (every entry of a batch) was there already, the same node "
                    "(same parent, type, role, content and client-given created_at: a retried write), "
                    "answered as stored; the active leaf advanced to it."
                ),
            ),
        },
        description='One entry {"role", "content", ...} or a batch {"entries": [...]}.',
    )
    def post(self, request: Request, thread_id: str) -> HttpResponseBase:
        _check_body_size(request)
        agent = request_agent(request)
        run_id = request_run_id(request)
        body = request.data
        if isinstance(body, dict) and "entries" in body:
            raw = body["entries"]
            if len(body) > 1:
                extra = sorted(set(body) - {"entries"})[0]
                raise DomainError("unknown_field", f"{extra}: Unknown field.", field=extra)
            if not isinstance(raw, list) or not raw:
                raise DomainError("invalid_type", "entries must be a non-empty list.", field="entries")
            if len(raw) > MAX_BATCH_ENTRIES:
                raise DomainError(
                    "batch_too_large",
                    f"A batch holds at most {MAX_BATCH_ENTRIES} entries (this one {len(raw)}).",
                    field="entries",
                    status=413,
                )
            specs = [entry_input(item, f"entries[{index}].") for index, item in enumerate(raw)]
            with run_holding(agent=agent, thread_external_id=thread_id, run_id=run_id):
                thread, created = thread_append(
                    agent=agent, external_id=thread_id, entries=specs, field_prefix="entries"
                )
            if _RENDERER.get_indent(request.accepted_media_type, {}) is not None:  # Accept: ...; indent=N
                return Response(
                    {
                        "entries": [entry_json(e, thread.external_id) for e in created],
                        "active_leaf_id": thread.active_leaf_id,
                    },
                    status=_added_status(created),
                )
            # The renderer's answer, written out (`batch_added_json`); the view's headers are DRF's.
            return HttpResponse(
                batch_added_json(created, thread.external_id, thread.active_leaf_id),
                status=_added_status(created),
                content_type=_RENDERER.media_type,
            )
        spec = entry_input(body)
        if run_id:
            with run_holding(agent=agent, thread_external_id=thread_id, run_id=run_id):
                thread, created = thread_append(agent=agent, external_id=thread_id, entries=[spec])
        else:
            # A plain append is one statement (memoryapp.threads.services._append_one_fast).
            thread, created = thread_append_one(agent=agent, external_id=thread_id, spec=spec)
        return Response(entry_json(created[0], thread.external_id), status=_added_status(created))

    @extend_schema(parameters=[EntriesQuery], responses={200: EntryPageOut})
    def get(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        query = validated(EntriesQuery, request.query_params.dict())
        page = entries_list(
            thread=thread,
            types=query["types"],
            limit=query["limit"],
            cursor=query.get("cursor"),
            before=query.get("before"),
            after=query.get("after"),
        )
        return Response(
            {
                "results": [entry_json(e, thread.external_id) for e in page.results],
                "next": _page_url(request, cursor=page.next_cursor) if page.next_cursor else None,
            }
        )


class ThreadPathView(APIView):
    """GET: one branch, oldest first (`leaf`, newest `limit`, `before` to page back, `types`)."""

    @extend_schema(parameters=[PathQuery], responses={200: PathPageOut})
    def get(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        query = validated(PathQuery, request.query_params.dict())
        limit = query.get("limit")
        entries = path_entries(
            thread=thread,
            leaf_id=query.get("leaf"),
            limit=limit,
            before=query.get("before"),
            types=query["types"],
        )
        more = limit is not None and len(entries) == limit and entries[0].parent_id is not None
        return Response(
            {
                "results": [entry_json(e, thread.external_id) for e in entries],
                "leaf_id": query.get("leaf") or thread.active_leaf_id,
                # The page before this one (older entries of the same branch), when there may be one.
                "next": _page_url(request, before=entries[0].id) if more else None,
            }
        )


class ThreadRewindView(APIView):
    @extend_schema(request=EntryIdInput, responses={200: ThreadOut})
    def post(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        data = validated(EntryIdInput, request.data)
        with run_holding(agent=thread.agent, thread_external_id=thread_id, run_id=request_run_id(request)):
            rewound, _ = thread_rewind_stale(thread=thread, entry_id=data["entry_id"], actor=_actor(request))
        return Response(thread_json(rewound))


class ThreadCheckoutView(APIView):
    @extend_schema(request=EntryIdInput, responses={200: ThreadOut})
    def post(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        data = validated(EntryIdInput, request.data)
        with run_holding(agent=thread.agent, thread_external_id=thread_id, run_id=request_run_id(request)):
            thread = thread_checkout(thread=thread, entry_id=data["entry_id"], actor=_actor(request))
        return Response(thread_json(thread))


class ThreadForkView(APIView):
    @extend_schema(request=ForkInput, responses={201: OpenApiResponse(ThreadOut, description="The new thread.")})
    def post(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        data = validated(ForkInput, request.data)
        copy = thread_fork(
            thread=thread, entry_id=data["entry_id"], new_thread_id=data["new_thread_id"], actor=_actor(request)
        )
        return Response(thread_json(copy), status=status.HTTP_201_CREATED)


class ThreadExportView(APIView):
    """GET: the thread as JSONL (000's session file: node records, then a head record)."""

    @extend_schema(
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(
                OpenApiTypes.STR,
                description=(
                    "JSON Lines, one record a line: a thread record, a node record per entry in seq order "
                    '({"type": "node", "node": {"id", "parent", "turn", "createdAt", "seq", "entryType", ...}}), '
                    'then a head record ({"type": "head", "leaf"}). POST /threads/import reads them back.'
                ),
            )
        }
    )
    def get(self, request: Request, thread_id: str) -> StreamingHttpResponse:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        lines = (line + "\n" for line in thread_export_lines(thread=thread))
        response = StreamingHttpResponse(lines, content_type="application/x-ndjson")
        response["Content-Disposition"] = f'attachment; filename="{thread.external_id}.jsonl"'
        return response


class NdjsonParser(BaseParser):
    """The body as text lines: JSONL is not one JSON document."""

    media_type = "application/x-ndjson"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = stream.read(MAX_REQUEST_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_REQUEST_BYTES:
            # Content-Length is checked first; a chunked body has none, so the read is bounded too.
            raise DomainError(
                "request_too_large", f"A request body holds at most {MAX_REQUEST_BYTES} bytes.", status=413
            )
        try:
            return raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError as exc:
            raise ParseError(f"The body is not UTF-8 text: {exc.reason} at byte {exc.start}.") from exc


class PlainTextParser(NdjsonParser):
    media_type = "text/plain"


class ImportJsonForm(serializers.Serializer):
    """The JSON form of an import, for the schema (the view reads the body itself: see below)."""

    id = serializers.CharField(required=False, help_text="The new thread's id (else ?id=, else the export's).")
    jsonl = serializers.CharField(required=False, help_text="The JSONL lines, as one string.")
    records = serializers.ListField(child=serializers.DictField(), required=False, help_text="Or the records, parsed.")


class ThreadImportView(APIView):
    """POST: a thread from JSONL (`?id=` names the new thread; else the export's own id)."""

    parser_classes = [NdjsonParser, PlainTextParser, JSONParser]

    @extend_schema(
        parameters=[OpenApiParameter("id", str, description="The new thread's id (else the export's own).")],
        request={
            "application/x-ndjson": OpenApiTypes.STR,
            "text/plain": OpenApiTypes.STR,
            "application/json": ImportJsonForm,
        },
        responses={201: OpenApiResponse(ThreadOut, description="The thread imported.")},
    )
    def post(self, request: Request) -> Response:
        _check_body_size(request)
        agent = request_agent(request)
        body = request.data
        if isinstance(body, dict):
            # The JSON form: {"id": ..., "jsonl": "<lines>"} or {"id": ..., "records": [...]}.
            unknown = sorted(set(body) - {"id", "jsonl", "records"})
            if unknown:
                raise DomainError("unknown_field", f"{unknown[0]}: Unknown field.", field=unknown[0])
            records = body.get("records")
            text = body.get("jsonl")
            if records is not None and not isinstance(records, list):
                raise DomainError("invalid_type", "records must be a list of JSONL records.", field="records")
            if text is not None and not isinstance(text, str):
                raise DomainError("invalid_type", "jsonl must be a string of JSONL lines.", field="jsonl")
            lines = [json.dumps(r) for r in records] if records is not None else (text or "").splitlines()
            thread_id = body.get("id") or request.query_params.get("id")
        elif isinstance(body, str):
            lines = body.splitlines()
            thread_id = request.query_params.get("id")
        else:
            raise DomainError("invalid_body", "Send JSONL lines (application/x-ndjson).", field="body")
        if thread_id is not None and not isinstance(thread_id, str):
            raise DomainError("invalid_type", "id must be a string.", field="id")
        thread = thread_import_lines(agent=agent, lines=lines, external_id=thread_id, actor=_actor(request))
        return Response(thread_json(thread), status=status.HTTP_201_CREATED)


class EntryView(APIView):
    @extend_schema(responses={200: EntryOut})
    def get(self, request: Request, entry_id: str) -> Response:
        entry = entry_for_agent(agent=request_agent(request), entry_id=entry_id)
        return Response(entry_json(entry, entry.thread.external_id))

    @extend_schema(
        parameters=[EntryDeleteQuery],
        responses={
            204: OpenApiResponse(
                description="Deleted: its children now stand under its parent. A user message takes its replies "
                "(up to the next user message) unless keep_replies=true; its copies in forks go too."
            )
        },
    )
    def delete(self, request: Request, entry_id: str) -> Response:
        entry = entry_for_agent(agent=request_agent(request), entry_id=entry_id)
        query = validated(EntryDeleteQuery, request.query_params.dict())
        entry_delete(entry=entry, keep_replies=query["keep_replies"], actor=_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class EntryRedactView(APIView):
    @extend_schema(request=RedactInput, responses={200: EntryOut})
    def post(self, request: Request, entry_id: str) -> Response:
        entry = entry_for_agent(agent=request_agent(request), entry_id=entry_id)
        data = validated(RedactInput, request.data)
        redacted = entry_redact(
            entry=entry, reason=data["reason"], keep_replies=data["keep_replies"], actor=_actor(request)
        )
        return Response(entry_json(redacted, entry.thread.external_id))
