"""The agent API of memory items, facts and the model's memory tools: thin views over the items services.

Every item is reached through `item_for_agent` / `items_list` (filtered by the request's agent
first), so another agent's item answers the same 404 as a missing one.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import (
    IsoDateTimeField,
    JsonObjectField,
    OutputSerializer,
    PersonIdField,
    StrictSerializer,
    validated,
)
from memoryapp.api.errors import ErrorOut
from memoryapp.api.parsers import ToolInputJSONParser
from memoryapp.api.search import ProblemOut
from memoryapp.api.tool_catalog import memory_tools_listed
from memoryapp.errors import DomainError, NotFound
from memoryapp.items.fact_tools import MEMORY_TOOL_NAMES, fact_tool_run, read_result_run
from memoryapp.items.facts import (
    DEFAULT_SEARCH_LIMIT,
    MAX_SEARCH_LIMIT,
    fact_forget,
    fact_recall,
    fact_remember,
    fact_search,
    facts_forget_all,
    namespace_check,
)
from memoryapp.items.facts import SEARCH_MODES as FACT_SEARCH_MODES
from memoryapp.items.purposes import recall_purpose_check
from memoryapp.items.selectors import item_evidence, item_for_agent, items_list, slot_history
from memoryapp.items.services import item_forget, item_write
from memoryapp.items.tool_scope import ToolScope
from memoryapp.models import AgentKey, MemoryItem
from memoryapp.models.choices import TRUST_RANK, EvidenceStatus, ItemKind, ItemStatus, Trust

MAX_PAGE_LIMIT = 1000


def _actor(request: Request) -> str:
    return f"agent:{request_agent(request).slug}"


# --- output serializers --------------------------------------------------------------------


class FileRangeOut(OutputSerializer):
    version_id = serializers.CharField(allow_null=True, help_text="The memory file version (null once deleted).")
    start_line = serializers.IntegerField(help_text="The first line quoted, from 1.")
    end_line = serializers.IntegerField(help_text="The last line quoted (inclusive).")


class EvidenceOut(OutputSerializer):
    id = serializers.IntegerField()
    entry_id = serializers.CharField(allow_null=True, help_text="The entry quoted (null once it is deleted).")
    tool_call_id = serializers.CharField(
        required=False, help_text="The tool call quoted, which the entry makes or answers (absent: the entry)."
    )
    file_range = FileRangeOut(required=False, help_text="The lines of a memory file version quoted.")
    quote = serializers.CharField()
    status = serializers.ChoiceField(
        choices=EvidenceStatus.choices, help_text="verified: found where it points (entry, tool call, lines)."
    )

    def to_representation(self, instance: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": instance.pk,
            "entry_id": instance.entry_id,
            "quote": instance.quote,
            "status": instance.status,
        }
        if instance.tool_call_id:
            body["tool_call_id"] = instance.tool_call_id
        if instance.line_start is not None:
            body["file_range"] = {
                "version_id": instance.file_version_id,
                "start_line": instance.line_start,
                "end_line": instance.line_end,
            }
        return body


class ItemOut(OutputSerializer):
    """An item as agents see it: declared here, rendered by `item_json`."""

    id = serializers.CharField()
    kind = serializers.ChoiceField(choices=ItemKind.choices)
    subject = serializers.CharField()
    attribute = serializers.CharField()
    value = serializers.CharField()
    trust = serializers.ChoiceField(choices=Trust.choices)
    status = serializers.ChoiceField(choices=ItemStatus.choices)
    confidence = serializers.FloatField()
    verified = serializers.BooleanField()
    user_id = serializers.CharField()
    project_id = serializers.CharField()
    thread_id = serializers.CharField()
    valid_from = IsoDateTimeField(help_text="When it became true in the world.")
    valid_to = IsoDateTimeField(allow_null=True, help_text="When it stopped being true (null: it holds).")
    recorded_at = IsoDateTimeField(help_text="When memory learned it.")
    expired_at = IsoDateTimeField(allow_null=True, help_text="When memory let it go (null: it is current).")
    times_retrieved = serializers.IntegerField()
    last_retrieved_at = IsoDateTimeField(allow_null=True)
    metadata = JsonObjectField()
    entity_id = serializers.CharField(required=False, help_text="The entity of the subject, when one is kept.")
    namespace = serializers.CharField(required=False, help_text="A fact's namespace (facts only).")
    value_json = serializers.JSONField(required=False, help_text="A fact's value as JSON (facts only).")
    expires_at = IsoDateTimeField(required=False, help_text="When a fact with a TTL vanishes.")
    prompt_version = serializers.CharField(required=False, help_text="The prompt that extracted it.")
    purposes = serializers.ListField(
        child=serializers.CharField(), help_text="What it was collected for (empty: no purpose in particular)."
    )


class ItemWithEvidenceOut(ItemOut):
    evidence = EvidenceOut(many=True, help_text="The quotes the item stands on.")


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def item_json(item: MemoryItem, *, evidence: bool = False) -> dict[str, Any]:
    """An item as `ItemOut` (with `evidence`: `ItemWithEvidenceOut`) declares it, built by hand:
    lists answer up to 1,000 items, and a DRF serializer costs about ten times as much."""
    body: dict[str, Any] = {
        "id": item.pk,
        "kind": item.kind,
        "subject": item.subject,
        "attribute": item.attribute,
        "value": item.value,
        "trust": item.trust,
        "status": item.status,
        "confidence": item.confidence,
        "verified": item.verified,
        "user_id": item.user_id,
        "project_id": item.project_id,
        "thread_id": item.thread_id,
        "valid_from": _iso(item.valid_from),
        "valid_to": _iso(item.valid_to),
        "recorded_at": _iso(item.recorded_at),
        "expired_at": _iso(item.expired_at),
        "times_retrieved": item.times_retrieved,
        "last_retrieved_at": _iso(item.last_retrieved_at),
        "metadata": item.metadata or {},
        "purposes": list(item.purposes or []),
    }
    if item.entity_id:
        body["entity_id"] = item.entity_id
    if item.namespace:
        body["namespace"] = item.namespace
        body["value_json"] = item.value_json
    if item.expires_at is not None:
        body["expires_at"] = _iso(item.expires_at)
    if item.prompt_version:
        body["prompt_version"] = item.prompt_version
    if evidence:
        body["evidence"] = EvidenceOut(item_evidence(item=item), many=True).data
    return body


class ItemPageOut(OutputSerializer):
    results = ItemOut(many=True)
    next = serializers.URLField(allow_null=True, help_text="The URL of the next page (null on the last).")


class FactOut(OutputSerializer):
    """A fact as 002's recall returns it."""

    namespace = serializers.CharField()
    key = serializers.CharField()
    value = serializers.JSONField(help_text="Any JSON value.")
    created_at_ms = serializers.IntegerField(help_text="When the key was first remembered (epoch milliseconds).")
    updated_at_ms = serializers.IntegerField(help_text="When this value was remembered (epoch milliseconds).")
    expires_at_ms = serializers.IntegerField(required=False, help_text="When it vanishes (with ttl_secs).")
    purposes = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="What it was collected for (absent: none)."
    )


class FactHitOut(FactOut):
    score = serializers.FloatField(
        required=False,
        help_text="0..1 (absent without q): the share of the words of q matched, or the cosine of a fact found "
        "by meaning, whichever is better.",
    )
    matched_by = serializers.ListField(
        child=serializers.ChoiceField(choices=["keyword", "vector"]),
        required=False,
        help_text="How it was found: by its words (keyword), by its meaning (vector), or both (absent without q).",
    )


class FactPageOut(OutputSerializer):
    results = FactHitOut(many=True)
    next = serializers.URLField(allow_null=True, help_text="Always null: one page holds every hit (up to limit).")
    mode = serializers.ChoiceField(
        choices=list(FACT_SEARCH_MODES),
        required=False,
        help_text="How the search ran: keyword when a search by meaning fell back to words (its embedder failed).",
    )
    errors = ProblemOut(  # type: ignore[assignment]
        many=True, required=False, help_text="Why a search by meaning fell back to words (source: embedder)."
    )


class FactForgottenOut(OutputSerializer):
    namespace = serializers.CharField()
    key = serializers.CharField()
    forgotten = serializers.BooleanField()


class NamespaceForgottenOut(OutputSerializer):
    namespace = serializers.CharField()
    deleted = serializers.IntegerField(help_text="How many facts were let go.")


class MemoryToolResultOut(OutputSerializer):
    result = serializers.CharField(help_text="The text the model reads as the tool's result.")
    is_error = serializers.BooleanField(help_text="The model's input was wrong; the result says how.")


class MemoryToolOut(OutputSerializer):
    name = serializers.CharField(help_text="The tool's name, as the model calls it (and MCP names it).")
    title = serializers.CharField(allow_null=True, help_text="A human-readable title, when the tool has one.")
    description = serializers.CharField(allow_blank=True, help_text="What the tool does, for the model.")
    input_schema = JsonObjectField(help_text="The JSON Schema of the tool's input (MCP inputSchema).")
    annotations = JsonObjectField(help_text="MCP's hints (readOnlyHint, destructiveHint, idempotentHint).")


class MemoryToolListOut(OutputSerializer):
    tools = MemoryToolOut(many=True)


def _page_url(request: Request, **changes: Any) -> str:
    params = {k: v for k, v in request.query_params.items()}
    params.update({k: str(v) for k, v in changes.items()})
    return request.build_absolute_uri(request.path) + "?" + urlencode(params)


# --- input serializers ---------------------------------------------------------------------


class ItemsQuery(StrictSerializer):
    user_id = serializers.CharField(required=False, allow_blank=True, max_length=128)
    project_id = serializers.CharField(required=False, allow_blank=True, max_length=128)
    thread_id = serializers.CharField(required=False, allow_blank=True, max_length=128)
    status = serializers.CharField(required=False, allow_blank=True)
    kind = serializers.ChoiceField(choices=ItemKind.choices, required=False)
    attribute = serializers.CharField(required=False, max_length=300)
    subject = serializers.CharField(required=False, max_length=300)
    as_of = serializers.DateTimeField(required=False)
    known_at = serializers.DateTimeField(required=False)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_LIMIT)
    cursor = serializers.CharField(required=False)


class FileRangeIn(StrictSerializer):
    version_id = serializers.CharField(max_length=40, help_text="A version of one of the agent's memory files.")
    start_line = serializers.IntegerField(min_value=1)
    end_line = serializers.IntegerField(min_value=1)


class EvidenceIn(StrictSerializer):
    """004 Evidence: a quote of an entry, of a tool call (`entry_id` the entry that makes or answers
    it, and `tool_call_id`), or of lines of a memory file version (`file_range`, no entry)."""

    entry_id = serializers.CharField(max_length=40, required=False)
    tool_call_id = serializers.CharField(max_length=200, required=False)
    file_range = FileRangeIn(required=False)
    quote = serializers.CharField(max_length=4000, trim_whitespace=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "file_range" not in attrs and not attrs.get("entry_id"):
            raise serializers.ValidationError({"entry_id": ["Name the entry quoted, or a file_range."]})
        return attrs


class ItemIn(StrictSerializer):
    kind = serializers.ChoiceField(choices=ItemKind.choices)
    subject = serializers.CharField(max_length=300)
    attribute = serializers.CharField(max_length=300)
    value = serializers.CharField(max_length=20_000)
    user_id = PersonIdField(default="")
    project_id = serializers.CharField(required=False, allow_blank=True, max_length=128, default="")
    thread_id = serializers.CharField(required=False, allow_blank=True, max_length=128, default="")
    trust = serializers.ChoiceField(choices=Trust.choices, required=False)
    confidence = serializers.FloatField(required=False, min_value=0.0, max_value=1.0)
    valid_from = serializers.DateTimeField(required=False)
    valid_to = serializers.DateTimeField(required=False)
    evidence = EvidenceIn(many=True, required=False)
    metadata = serializers.DictField(required=False)
    prompt_version = serializers.CharField(required=False, allow_blank=True, max_length=40, default="")
    purposes = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        allow_null=True,
        help_text="What it is collected for: each one of the agent's purposes (GET /settings/purposes).",
    )


class FactIn(StrictSerializer):
    value = serializers.JSONField()
    ttl_secs = serializers.IntegerField(required=False, min_value=1, allow_null=True)
    purposes = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        allow_null=True,
        help_text="What it is collected for: each one of the agent's purposes (GET /settings/purposes).",
    )


class FactSearchQuery(StrictSerializer):
    q = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")
    mode = serializers.ChoiceField(
        choices=list(FACT_SEARCH_MODES),
        required=False,
        default="hybrid",
        help_text="keyword: by the words of q (002 search); semantic: by meaning (002 Memory.semantic); hybrid "
        "(default): both, each fact scored by the better of the two.",
    )
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_SEARCH_LIMIT)
    all = serializers.BooleanField(required=False)
    purpose = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=32,
        default="",
        help_text="Only facts collected for this purpose or for none (one of GET /settings/purposes).",
    )


class MemoryToolIn(StrictSerializer):
    name = serializers.ChoiceField(choices=list(MEMORY_TOOL_NAMES))
    input = serializers.DictField()
    user_id = PersonIdField(default="")
    project_id = serializers.CharField(required=False, allow_blank=True, max_length=128, default="")
    thread_id = serializers.CharField(required=False, allow_blank=True, max_length=128, default="")
    namespace = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
    ttl_secs = serializers.IntegerField(required=False, min_value=1, allow_null=True)
    purpose = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=32,
        default="",
        help_text="The purpose of the run (one of GET /settings/purposes): remember writes facts collected "
        "for it, search_memory finds only facts of it or of none.",
    )


# --- items -----------------------------------------------------------------------------------


class ItemsView(APIView):
    @extend_schema(
        operation_id="v1_items_list",
        parameters=[ItemsQuery],
        responses={200: ItemPageOut},
        summary="List the agent's items the scope sees, newest first (as_of / known_at: what held then)",
    )
    def get(self, request: Request) -> Response:
        query = validated(ItemsQuery, request.query_params.dict())
        statuses = [s.strip() for s in request.query_params.getlist("status") for s in s.split(",") if s.strip()]
        limit = query.get("limit", 100)
        page = items_list(
            agent=request_agent(request),
            user_id=query.get("user_id"),
            project_id=query.get("project_id"),
            thread_id=query.get("thread_id"),
            statuses=statuses,
            kind=query.get("kind"),
            attribute=query.get("attribute"),
            subject=query.get("subject"),
            as_of=query.get("as_of"),
            known_at=query.get("known_at"),
            limit=limit,
            cursor=query.get("cursor"),
        )
        return Response(
            {
                "results": [item_json(i) for i in page.results],
                "next": _page_url(request, cursor=page.next_cursor) if page.next_cursor else None,
            }
        )

    @extend_schema(
        request=ItemIn,
        responses={
            201: ItemWithEvidenceOut,
            403: OpenApiResponse(ErrorOut, description="trust_not_allowed: more trusted than the key may write."),
        },
        summary="Write an item (trust at most the key's max_trust; model items arrive suggested)",
    )
    def post(self, request: Request) -> Response:
        body = validated(ItemIn, request.data)
        key = request.auth
        allowed = key.max_trust if isinstance(key, AgentKey) else Trust.MODEL
        trust = body.get("trust") or allowed
        if TRUST_RANK[Trust(trust)] < TRUST_RANK[Trust(allowed)]:
            raise DomainError(
                "trust_not_allowed",
                f"This key may write items as trusted as {allowed!s} at most.",
                field="trust",
                status=403,
            )
        agent = request_agent(request)
        item = item_write(
            agent=agent,
            kind=body["kind"],
            subject=body["subject"],
            attribute=body["attribute"],
            value=body["value"],
            trust=trust,
            user_id=body["user_id"],
            project_id=body["project_id"],
            thread_id=body["thread_id"],
            evidence=[dict(e) for e in body.get("evidence", [])],  # type: ignore[misc]
            confidence=body.get("confidence"),
            valid_from=body.get("valid_from"),
            valid_to=body.get("valid_to"),
            metadata=body.get("metadata"),
            prompt_version=body["prompt_version"],
            shadow=False,
            actor=_actor(request),
            purposes=body.get("purposes"),
        )
        return Response(item_json(item, evidence=True), status=status.HTTP_201_CREATED)


class ItemView(APIView):
    @extend_schema(responses={200: ItemWithEvidenceOut})
    def get(self, request: Request, item_id: str) -> Response:
        item = item_for_agent(agent=request_agent(request), item_id=item_id)
        return Response(item_json(item, evidence=True))


class ItemHistoryView(APIView):
    @extend_schema(
        responses={200: OpenApiResponse(ItemPageOut, description="Every value of the item's slot (one page).")}
    )
    def get(self, request: Request, item_id: str) -> Response:
        item = item_for_agent(agent=request_agent(request), item_id=item_id)
        return Response({"results": [item_json(i) for i in slot_history(item=item)], "next": None})


class ItemForgetView(APIView):
    @extend_schema(request=None, responses={200: ItemOut})
    def post(self, request: Request, item_id: str) -> Response:
        body = request.data
        if body:
            # Any JSON may arrive here (a number, a list): name a field only when there is one.
            field = next(iter(body), None) if isinstance(body, dict) else None
            raise DomainError("invalid_value", "This request takes no body.", field=field)
        item = item_for_agent(agent=request_agent(request), item_id=item_id)
        return Response(item_json(item_forget(item=item, actor=_actor(request))))


# --- facts ----------------------------------------------------------------------------------

FACT_OR_HITS = PolymorphicProxySerializer(
    component_name="FactOrHits",
    serializers=[FactOut, FactPageOut],
    resource_type_field_name=None,
    many=False,
)
FORGOTTEN = PolymorphicProxySerializer(
    component_name="FactsForgotten",
    serializers=[FactForgottenOut, NamespaceForgottenOut],
    resource_type_field_name=None,
    many=False,
)


def _split(path: str) -> tuple[str, str]:
    namespace, _, key = path.rpartition("/")
    return namespace, key


class FactsView(APIView):
    """`/facts/{namespace}/{key}` (one fact) and `/facts/{namespace}` (search, forget all).

    A namespace holds slashes, so the path alone cannot tell `users/42` (a namespace) from
    `users` + key `42`. A GET with `q`, `limit` or `mode`, or of a path of one segment, searches the whole
    path as a namespace; otherwise the last segment is the key. A DELETE forgets a whole namespace
    only with `all=true`: it cannot be undone, so `all=false`, `all=maybe` or a path of one segment
    without `all` is a 400 naming `all`, never a guess.
    """

    def _is_namespace(self, request: Request, path: str) -> bool:
        return "/" not in path or any(name in request.query_params for name in ("q", "limit", "mode"))

    def _forgets_namespace(self, request: Request, path: str) -> bool:
        if "all" not in request.query_params:
            if "/" not in path:
                raise DomainError(
                    "invalid_value",
                    "To forget every fact of a namespace send all=true; to forget one fact, name its key.",
                    field="all",
                )
            return False
        if request.query_params.getlist("all") != ["true"]:
            raise DomainError(
                "invalid_value", "all must be true (it forgets every fact of the namespace).", field="all"
            )
        return True

    @extend_schema(
        parameters=[
            OpenApiParameter("q", str),
            OpenApiParameter("limit", int),
            OpenApiParameter(
                "mode",
                str,
                enum=list(FACT_SEARCH_MODES),
                description="keyword, semantic (by meaning) or hybrid (default: both)",
            ),
        ],
        responses={200: FACT_OR_HITS},
        summary="Recall /facts/{namespace}/{key}, or search /facts/{namespace}?q=&limit=",
    )
    def get(self, request: Request, path: str) -> Response:
        agent = request_agent(request)
        if self._is_namespace(request, path):
            query = validated(FactSearchQuery, request.query_params.dict())
            hits = fact_search(
                agent=agent,
                namespace=path,
                text=query["q"],
                limit=query.get("limit", DEFAULT_SEARCH_LIMIT),
                purpose=query["purpose"],
                mode=query["mode"],
            )
            results = [
                {**h.fact, "score": h.score, **({"matched_by": list(h.matched_by)} if h.matched_by else {})}
                for h in hits
            ]
            page = {"results": results, "next": None, "mode": hits.mode, "errors": hits.errors}
            return Response(FactPageOut(page).data)
        namespace, key = _split(path)
        fact = fact_recall(agent=agent, namespace=namespace, key=key)
        if fact is None:
            raise NotFound("The fact")
        return Response(FactOut(fact).data)

    @extend_schema(request=FactIn, responses={200: FactOut}, summary="Remember a fact: /facts/{namespace}/{key}")
    def put(self, request: Request, path: str) -> Response:
        if "/" not in path:
            raise DomainError(
                "invalid_value", "Name a namespace and a key: /facts/{namespace}/{key}.", field="namespace"
            )
        namespace, key = _split(path)
        body = validated(FactIn, request.data)
        fact = fact_remember(
            agent=request_agent(request),
            namespace=namespace,
            key=key,
            value=body["value"],
            ttl_secs=body.get("ttl_secs"),
            actor=_actor(request),
            purposes=body.get("purposes"),
        )
        return Response(FactOut(fact).data)

    @extend_schema(
        parameters=[OpenApiParameter("all", str, enum=["true"], description="true: forget the whole namespace")],
        responses={200: FORGOTTEN},
        summary="Forget /facts/{namespace}/{key} (history kept), or every fact of /facts/{namespace}?all=true",
    )
    def delete(self, request: Request, path: str) -> Response:
        agent = request_agent(request)
        if self._forgets_namespace(request, path):
            namespace_check(path)
            deleted = facts_forget_all(agent=agent, namespace=path, actor=_actor(request))
            return Response(NamespaceForgottenOut({"namespace": path, "deleted": deleted}).data)
        namespace, key = _split(path)
        fact = fact_forget(agent=agent, namespace=namespace, key=key, actor=_actor(request))
        return Response(FactForgottenOut({**fact, "forgotten": True}).data)


# --- the model's memory tools ------------------------------------------------------------------


class MemoryToolsView(APIView):
    """Runs the tool call a model produced (`remember`, `forget`, `search_memory`, `read_result`) and
    returns its result text.

    The facts live in `users/<user_id>` (002 `Memory.byState("user_id", "users")`) unless the call
    names another namespace (`Memory.shared`). The body's `user_id`, `project_id`, `thread_id` and
    `namespace` are the configuration: what the model's input names stays inside that scope
    (`ToolScope`), another person's namespace or thread answering as a missing one. `read_result`
    reads back a tool result that compaction cleared (`{"handle"}`). A tool input the model got wrong
    is answered as a tool result with `is_error` (the model reads it and tries again); a request the
    developer got wrong (no scope, unknown tool) is a 400.
    """

    # A NUL in the model's input is the tool's to answer (is_error), not a 400.
    parser_classes = [ToolInputJSONParser]

    @extend_schema(
        operation_id="v1_memory_tools_list",
        responses={200: MemoryToolListOut},
        summary="List the memory tools with their input schemas, as MCP tools/list does",
    )
    def get(self, request: Request) -> Response:
        request_agent(request)  # a key is required, as for every tool call
        return Response({"tools": memory_tools_listed()})

    @extend_schema(
        request=MemoryToolIn,
        responses={200: MemoryToolResultOut},
        summary="Run the model's remember / forget / search_memory / read_result tool call",
    )
    def post(self, request: Request) -> Response:
        body = validated(MemoryToolIn, request.data)
        scope = ToolScope(
            agent=request_agent(request),
            user_id=body["user_id"],
            project_id=body["project_id"],
            thread_id=body["thread_id"],
            namespace=body["namespace"],
            purpose=recall_purpose_check(agent=request_agent(request), purpose=body["purpose"]),
        )
        if body["name"] == "read_result":
            outcome = read_result_run(scope=scope, tool_input=body["input"])
        else:
            outcome = fact_tool_run(
                scope=scope,
                name=body["name"],
                tool_input=body["input"],
                ttl_secs=body.get("ttl_secs"),
                actor=_actor(request),
            )
        return Response(MemoryToolResultOut({"result": outcome.result, "is_error": outcome.is_error}).data)
