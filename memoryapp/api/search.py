"""Search and context building over the agent API: POST /search, POST /threads/{id}/context."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryapp.api.auth import request_agent
from memoryapp.api.base import IsoDateTimeField, OutputSerializer, StrictSerializer, validated
from memoryapp.api.limits import heavy_request
from memoryapp.compaction.auto import compaction_pre_step
from memoryapp.consolidation.brief import CARD_KINDS, MAX_BRIEF_CARDS
from memoryapp.context.builder import MAX_TOKENS_LIMIT, STRATEGIES, ContextRequest, context_build
from memoryapp.items.purposes import recall_purpose_check
from memoryapp.items.selectors import MAX_CONTEXT_FACTS
from memoryapp.models import AccessLog
from memoryapp.models.choices import Role
from memoryapp.search.access_log import access_log_record
from memoryapp.search.retrieval import KINDS, METHODS, search
from memoryapp.threads.selectors import thread_for_agent

MAX_TEXT = 10_000
HIT_KINDS = ("entry", "item")
DROP_REASONS = ("budget", "duplicate", "not-selected", "oversized")


class SearchInput(StrictSerializer):
    text = serializers.CharField(max_length=MAX_TEXT, allow_blank=False, trim_whitespace=True)
    thread_id = serializers.CharField(max_length=128, required=False)
    user_id = serializers.CharField(max_length=128, required=False, allow_blank=True)
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=KINDS), required=False, min_length=1, max_length=len(KINDS)
    )
    limit = serializers.IntegerField(min_value=1, max_value=100, required=False, default=10)
    method = serializers.ChoiceField(choices=METHODS, required=False, default="hybrid")
    as_of = serializers.DateTimeField(required=False)
    purpose = serializers.CharField(
        max_length=32,
        required=False,
        allow_blank=True,
        default="",
        help_text="Recall for this purpose only: items and facts collected for it or for none (one of "
        "GET /settings/purposes; another is a 400 naming purpose). Turns are not purpose-bound.",
    )


# --- output serializers --------------------------------------------------------------------
#
# Declared here, rendered by the search and the context builder themselves (`Hit.as_json`,
# `BuiltContext.as_json`): they are the hot paths the benches measure, and their answers are plain
# dicts already. tests/api/test_api_schema.py checks every answer against these declarations.


class ProblemOut(OutputSerializer):
    # A field named like a serializer attribute (`source`, `errors`): DRF's metaclass takes declared
    # fields out of the class, so only mypy sees a clash.
    source = serializers.CharField(  # type: ignore[assignment]
        help_text="The part that failed: vector, embedder, history, facts, semantic, ..."
    )
    message = serializers.CharField()


class SearchHitOut(OutputSerializer):
    kind = serializers.ChoiceField(choices=HIT_KINDS)
    id = serializers.CharField()
    text = serializers.CharField()
    score = serializers.FloatField(help_text="Higher is better; comparable within one answer.")
    channels = serializers.ListField(
        child=serializers.CharField(), help_text="How it was found: keyword, vector, neighbour (a turn next to a hit)."
    )
    thread_id = serializers.CharField(allow_null=True, help_text="An entry's thread, an item's thread scope.")
    created_at = IsoDateTimeField(allow_null=True)
    seq = serializers.IntegerField(required=False, help_text="Entries only.")
    role = serializers.CharField(required=False, allow_blank=True, help_text="Entries only.")
    sender_name = serializers.CharField(required=False, allow_blank=True, help_text="Entries only ('' when none).")
    item_kind = serializers.CharField(required=False, help_text="Items only: fact, preference, ...")
    valid_from = IsoDateTimeField(required=False, allow_null=True, help_text="Items only.")
    valid_to = IsoDateTimeField(required=False, allow_null=True, help_text="Items only.")


class SearchOut(OutputSerializer):
    results = SearchHitOut(many=True, help_text="Best first.")
    errors = ProblemOut(  # type: ignore[assignment]
        many=True, help_text="Parts that failed (the answer is made of the rest)."
    )
    warnings = serializers.ListField(child=serializers.CharField())


class ContextMessageOut(OutputSerializer):
    role = serializers.ChoiceField(choices=Role.choices)
    content = serializers.JSONField(help_text="Text, or a list of content blocks.")
    tool_calls = serializers.ListField(child=serializers.JSONField(), required=False)
    tool_call_id = serializers.CharField(required=False)
    name = serializers.CharField(required=False, help_text="The tool's name (tool results) or the sender's.")
    compaction_id = serializers.CharField(required=False, help_text="The summary's compaction entry.")
    entry_id = serializers.CharField(required=False, help_text="The entry a history message comes from.")
    cache_breakpoint = serializers.BooleanField(required=False, help_text="A good place for a prompt-cache mark.")


class ContextFactOut(OutputSerializer):
    id = serializers.CharField(help_text="The item.")
    text = serializers.CharField()


class ContextObservationOut(OutputSerializer):
    entity_id = serializers.CharField()
    name = serializers.CharField()
    path = serializers.CharField(help_text="The observation's memory file under /memories/observations/.")


class BriefCardOut(OutputSerializer):
    kind = serializers.ChoiceField(choices=CARD_KINDS)
    text = serializers.CharField()
    quote = serializers.CharField(help_text="Three words or more its source holds, word for word.")
    source = serializers.CharField(  # type: ignore[assignment]
        help_text="item:<id> or turn:<entry id>."
    )


class RecalledEntryOut(OutputSerializer):
    id = serializers.CharField()
    seq = serializers.IntegerField()
    text = serializers.CharField()
    created_at = IsoDateTimeField(allow_null=True)
    sender_name = serializers.CharField(allow_blank=True)
    role = serializers.CharField(allow_blank=True)
    score = serializers.FloatField()
    channels = serializers.ListField(child=serializers.CharField())


class RecalledItemOut(OutputSerializer):
    id = serializers.CharField()
    text = serializers.CharField()
    kind = serializers.CharField()
    score = serializers.FloatField()


class RecalledOut(OutputSerializer):
    entries = RecalledEntryOut(many=True)
    items = RecalledItemOut(many=True)


class DroppedEntryOut(OutputSerializer):
    id = serializers.CharField()
    seq = serializers.IntegerField()
    type = serializers.CharField()
    role = serializers.CharField(allow_blank=True)
    tokens = serializers.IntegerField()


class DroppedBlockOut(OutputSerializer):
    partition = serializers.CharField(help_text="recent, recall, facts, ...")
    reason = serializers.ChoiceField(choices=DROP_REASONS)
    tokens = serializers.IntegerField()
    source_id = serializers.CharField(help_text="The entry or item left out.")


class GraphNodeOut(OutputSerializer):
    id = serializers.CharField(help_text="The entity.")
    name = serializers.CharField()
    aliases = serializers.ListField(child=serializers.CharField())
    hop = serializers.IntegerField(help_text="0: named by the input; else the hops that reached it.")


class GraphQuoteOut(OutputSerializer):
    entry_id = serializers.CharField(allow_null=True, help_text="The entry the quote is in.")
    quote = serializers.CharField()


class GraphEdgeOut(OutputSerializer):
    id = serializers.CharField(help_text="The relation.")
    subject_id = serializers.CharField()
    predicate = serializers.CharField()
    object_id = serializers.CharField()
    confidence = serializers.FloatField()
    hop = serializers.IntegerField()
    evidence = GraphQuoteOut(many=True, help_text="The quotes the edge stands on.")


class GraphContextOut(OutputSerializer):
    nodes = GraphNodeOut(many=True, help_text="The entities placed (ends of the edges sent).")
    edges = GraphEdgeOut(many=True, help_text="The edges sent, in the graph partition.")


class SemanticResultOut(OutputSerializer):
    document_id = serializers.CharField(help_text="The knowledge document (GET /knowledge/{id}).")
    name = serializers.CharField()
    seq = serializers.IntegerField(help_text="The passage's place in its document.")
    text = serializers.CharField()
    score = serializers.FloatField()
    channels = serializers.ListField(child=serializers.CharField())


class DroppedOut(OutputSerializer):
    entries = DroppedEntryOut(many=True, help_text="History entries left out.")
    blocks = DroppedBlockOut(many=True, help_text="Every block left out, with its partition and reason.")
    graph_nodes = GraphNodeOut(many=True, help_text="Nodes cut from the graph context (with the edges reaching them).")
    semantic_results = SemanticResultOut(many=True, help_text="Knowledge passages found that did not fit.")
    token_count = serializers.IntegerField()


class PlacedDocumentOut(OutputSerializer):
    name = serializers.CharField(help_text="The document's name (AGENTS.md ...), under /memories/context/.")
    scope = serializers.ChoiceField(choices=("thread", "project", "agent"))
    version_id = serializers.CharField(help_text="The version placed (GET /memory-files/versions/{id}).")


class ContextMetadataOut(OutputSerializer):
    strategy = serializers.ChoiceField(choices=STRATEGIES)
    budget = serializers.IntegerField(help_text="max_tokens less reserve_tokens.")
    reserve_tokens = serializers.IntegerField()
    original_message_count = serializers.IntegerField()
    included_message_count = serializers.IntegerField()
    facts_included = serializers.IntegerField()
    semantic_results_included = serializers.IntegerField()
    recalled_entries = serializers.IntegerField()
    recalled_items = serializers.IntegerField()
    graph_nodes_included = serializers.IntegerField()
    graph_edges_included = serializers.IntegerField()
    semantic_context_included = serializers.IntegerField(help_text="Knowledge passages placed.")
    time_zone = serializers.CharField(help_text="The IANA zone the dates of the memory context are written in.")
    memory = serializers.ChoiceField(
        choices=("on", "off"), help_text="The thread's memory switch (off: nothing recalled)."
    )


class ContextOut(OutputSerializer):
    """The reference's BuiltContext: the messages for the next model call, and what went into them."""

    messages = ContextMessageOut(many=True)
    memory_context = serializers.CharField(allow_null=True, help_text="The <memory_context> block (null: none).")
    partitions = serializers.DictField(child=serializers.IntegerField(), help_text="Tokens used by each partition.")
    facts = ContextFactOut(many=True)
    observations = ContextObservationOut(
        many=True, help_text="Observations of the entities the input names or recall found, next to the facts."
    )
    brief_cards = BriefCardOut(many=True, help_text="The pre-turn brief's cards (brief_cards asked), in the brief.")
    recalled = RecalledOut()
    documents = PlacedDocumentOut(
        many=True, help_text="The context documents placed in the pinned partition, nearest scope first."
    )
    graph = GraphContextOut(allow_null=True, help_text="With include_graph_context: the graph context placed.")
    semantic_results = SemanticResultOut(
        many=True, help_text="With include_semantic_context: the knowledge passages placed, best first."
    )
    token_count = serializers.IntegerField()
    truncated = serializers.BooleanField(help_text="Some of the history was left out.")
    dropped = DroppedOut()
    errors = ProblemOut(  # type: ignore[assignment]
        many=True, help_text="Parts that failed; the context is built from the rest."
    )
    warnings = serializers.ListField(child=serializers.CharField())
    metadata = ContextMetadataOut()


class SearchView(APIView):
    @extend_schema(request=SearchInput, responses={200: SearchOut})
    def post(self, request: Request) -> Response:
        agent = request_agent(request)
        data = validated(SearchInput, request.data)
        purpose = recall_purpose_check(agent=agent, purpose=data["purpose"])
        thread = thread_for_agent(agent=agent, external_id=data["thread_id"]) if data.get("thread_id") else None
        with heavy_request(request):
            outcome = search(
                agent=agent,
                text=data["text"],
                thread=thread,
                user_id=data.get("user_id"),
                kinds=tuple(data.get("kinds") or KINDS),
                limit=data["limit"],
                method=data["method"],
                as_of=data.get("as_of"),
                purpose=purpose,
            )
        access_log_record(
            agent_id=agent.pk,
            thread=thread,
            user_id=data.get("user_id") or "",
            source=AccessLog.Source.SEARCH,
            item_ids=[hit.id for hit in outcome.hits if hit.kind == "item"],
            entry_ids=[hit.id for hit in outcome.hits if hit.kind == "entry"],
        )
        return Response(
            {
                "results": [hit.as_json() for hit in outcome.hits],
                "errors": outcome.errors,
                "warnings": outcome.warnings,
            }
        )


class PartitionsField(serializers.DictField):
    child = serializers.FloatField(min_value=0, max_value=1)


class ContextInput(StrictSerializer):
    strategy = serializers.ChoiceField(choices=STRATEGIES, required=False, default="hybrid")
    max_tokens = serializers.IntegerField(min_value=1, max_value=MAX_TOKENS_LIMIT)
    reserve_tokens = serializers.IntegerField(min_value=0, required=False)
    system_prompt = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="")
    pinned = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False), required=False, default=list
    )
    index = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="")
    brief = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="")
    current_input = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False, default="", max_length=MAX_TEXT * 10
    )
    leaf_id = serializers.CharField(required=False, allow_null=True, max_length=40)
    as_of = serializers.DateTimeField(required=False, allow_null=True)
    include_facts = serializers.BooleanField(required=False, default=True)
    facts_recall = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=0,
        max_value=MAX_CONTEXT_FACTS,
        help_text="002 recall: at most this many facts in the facts partition, the best matches for current_input "
        "(by its words and its meaning), then the newest; the others are dropped as not-selected. Absent or null: "
        "every fact of the thread's scope the partition has room for.",
    )
    partitions = PartitionsField(required=False, allow_empty=True)
    brief_cards = serializers.IntegerField(
        required=False,
        default=0,
        min_value=0,
        max_value=MAX_BRIEF_CARDS,
        help_text="Ask for the pre-turn brief: up to this many cards (0: none) about what memory finds for "
        "current_input, each quoting its source, in the brief partition. Needs a language model.",
    )
    include_observations = serializers.BooleanField(
        required=False, default=True, help_text="Observations of the entities the turn names or recalls."
    )
    file_index = serializers.BooleanField(
        required=False, default=False, help_text="List the memory files the thread's scope sees in the index."
    )
    include_graph_context = serializers.BooleanField(
        required=False,
        default=False,
        help_text="The knowledge graph around the entities current_input names (graph partition, recall's share).",
    )
    include_semantic_context = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Passages of the agent's knowledge documents found for current_input (semantic partition).",
    )
    graph_hops = serializers.IntegerField(
        required=False, default=2, min_value=0, max_value=3, help_text="How far the graph context reaches (0-3)."
    )
    time_zone = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=64,
        default="",
        help_text="IANA zone the memory context's dates are written in (default: the thread's "
        "metadata.time_zone, else UTC). An unknown name is a 400 naming time_zone.",
    )
    project_id = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=128,
        default="",
        help_text="The project whose context documents apply (default: the thread's metadata.project_id).",
    )
    purpose = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=32,
        default="",
        help_text="Recall for this purpose only: facts and recalled items collected for it or for none, and "
        "no observations (one of GET /settings/purposes; another is a 400 naming purpose).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        reserve = attrs.get("reserve_tokens")
        if reserve is not None and reserve >= attrs["max_tokens"]:
            raise serializers.ValidationError({"reserve_tokens": ["Must be less than max_tokens."]})
        return attrs


class ContextView(APIView):
    @extend_schema(request=ContextInput, responses={200: ContextOut})
    def post(self, request: Request, thread_id: str) -> Response:
        agent = request_agent(request)
        thread = thread_for_agent(agent=agent, external_id=thread_id)
        data = validated(ContextInput, request.data)
        # 003 preStep: a thread past its trigger is compacted before its next model step.
        compaction_pre_step(thread=thread)
        with heavy_request(request):
            built = context_build(agent=agent, thread=thread, request=ContextRequest(**data))
        return Response(built.as_json())
