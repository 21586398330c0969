"""The agent API of compaction, extraction and cleared tool results: thin views over the services.

POST /api/v1/threads/{id}/compact   {"strategy", ...options, "async"?}
GET|PATCH /api/v1/settings/compaction                   the agent's automatic compaction
GET|PATCH /api/v1/threads/{id}/settings/compaction      a thread's own, over its agent's
POST /api/v1/threads/{id}/extract   {"async"?}
GET  /api/v1/tool-results/{handle}  the content a cleared tool result stands for (read_result)
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from governance.models import JobRun
from memoryapp.api.auth import request_agent
from memoryapp.api.base import (
    IsoDateTimeField,
    JsonObjectField,
    OutputSerializer,
    StrictSerializer,
    TextOrNullField,
    validated,
)
from memoryapp.api.errors import ErrorOut
from memoryapp.api.runs import request_run_id
from memoryapp.api.threads import EntryOut, entry_json
from memoryapp.compaction.auto import (
    MAX_CONTEXT_WINDOW,
    MAX_KEEP_RECENT,
    MAX_MESSAGE_THRESHOLD,
    MODEL_NAME,
    AutoCompaction,
    agent_compaction_settings,
    agent_compaction_settings_set,
    thread_auto_compaction,
    thread_compaction_set,
)
from memoryapp.compaction.plan import CLEAR_TOOL_RESULTS, STRATEGY_NAMES
from memoryapp.compaction.services import compaction_now, compaction_request
from memoryapp.errors import DomainError, NotFound
from memoryapp.extraction.services import ExtractionFailed, extraction_now, extraction_request
from memoryapp.llm.model import ModelError
from memoryapp.models import Entry
from memoryapp.models.choices import AutoCompactionStrategy, EntryType, Role
from memoryapp.prompts import SUMMARY_TEMPLATES
from memoryapp.threads.runs import run_causing
from memoryapp.threads.selectors import entry_for_agent, thread_for_agent


def _actor(request: Request) -> str:
    return f"agent:{request_agent(request).slug}"


class ModelFailed(DomainError):
    """A job run in the request (`async: false`) failed because the language model did: a 502 (the
    upstream failed) carrying the error the failed job run records, as the async path's run would."""

    status = 502

    def __init__(self, code: str, what: str, error: Exception):
        super().__init__(code, f"{what} failed: {error}")


MODEL_FAILED = OpenApiResponse(
    ErrorOut,
    description="Ran in the request (async: false) and the language model failed: `compaction_failed` or "
    "`extraction_failed`, with the error its failed job run records. No compaction or item was written.",
)


# --- output serializers --------------------------------------------------------------------


class JobRunOut(OutputSerializer):
    id = serializers.IntegerField()
    kind = serializers.CharField(help_text="compaction, extraction, ...")
    status = serializers.ChoiceField(choices=JobRun.Status.choices)
    result = JsonObjectField(help_text="What the job did (its fields depend on the kind).")
    error = TextOrNullField(help_text="Why it failed or was skipped (null: no error).")
    usage = JsonObjectField(help_text="Model calls, tokens, latency and cost.")
    created_at = IsoDateTimeField(allow_null=True)
    finished_at = IsoDateTimeField(allow_null=True)


def job_run_json(run: JobRun) -> dict[str, Any]:
    return dict(JobRunOut(run).data)


class JobAcceptedOut(OutputSerializer):
    job_run = JobRunOut(help_text="The queued job: follow it in the admin's job runs.")


class CompactionSkippedOut(OutputSerializer):
    job_run = JobRunOut()
    strategy = serializers.CharField()
    compacted = serializers.BooleanField(help_text="Always false here.")
    reason = serializers.CharField(allow_blank=True, help_text="Why nothing was compacted.")
    partial = serializers.CharField(  # type: ignore[assignment]  # a declared field, not BaseSerializer.partial
        required=False, help_text="What the zero-model tier left out."
    )


class CompactedOut(OutputSerializer):
    """Declared here, built from the compaction's own result (`as_result`) and the new entry."""

    job_run = JobRunOut()
    strategy = serializers.CharField()
    compacted = serializers.BooleanField(help_text="Always true here.")
    compaction_entry_id = serializers.CharField()
    first_kept_entry_id = serializers.CharField(allow_null=True)
    tokens_before = serializers.IntegerField(allow_null=True)
    tokens_after = serializers.IntegerField(allow_null=True)
    cleared = serializers.IntegerField(help_text="Tool results cleared.")
    prompt_version = serializers.CharField(allow_blank=True)
    reason = serializers.CharField(required=False)
    partial = serializers.CharField(  # type: ignore[assignment]  # a declared field, not BaseSerializer.partial
        required=False, help_text="What the zero-model tier left out."
    )
    entry = EntryOut(help_text="The compaction entry, at the end of the active branch.")


class ExtractionResultOut(OutputSerializer):
    windows = serializers.IntegerField()
    items_written = serializers.IntegerField()
    relations_written = serializers.IntegerField(help_text="Edges of the knowledge graph written or merged.")
    items_left_out = serializers.IntegerField()
    items_dropped_entries_gone = serializers.IntegerField()
    quotes_dropped = serializers.IntegerField()
    model_calls = serializers.IntegerField()
    continuations = serializers.IntegerField()
    through_seq = serializers.IntegerField(allow_null=True, help_text="The last entry read.")
    failed_windows = serializers.ListField(child=serializers.DictField())
    prompt_version = serializers.CharField()


class ExtractionOut(OutputSerializer):
    job_run = JobRunOut()
    result = ExtractionResultOut(required=False, help_text="Absent when the job was skipped.")
    item_ids = serializers.ListField(child=serializers.CharField(), required=False, help_text="The items written.")


class ToolResultOut(OutputSerializer):
    handle = serializers.CharField(source="id")
    thread_id = serializers.CharField(source="thread.external_id")
    tool_call_id = serializers.CharField(allow_blank=True)
    tool_name = serializers.CharField(allow_blank=True)
    content = serializers.JSONField(help_text="The result as the tool gave it.")
    text = serializers.CharField(allow_blank=True)
    redacted = serializers.SerializerMethodField()

    def get_redacted(self, entry: Entry) -> bool:
        return entry.redacted_at is not None


class SummarizeFallbackInput(StrictSerializer):
    preserve_recent_turns = serializers.IntegerField(required=False, min_value=0, max_value=10_000)
    preserve_user_messages = serializers.IntegerField(required=False, min_value=0, max_value=100)
    summarizer_input_char_budget = serializers.IntegerField(required=False, min_value=0, max_value=10_000_000)
    summarizer_timeout = serializers.FloatField(required=False, min_value=0.1, max_value=600, allow_null=True)
    prompt = serializers.CharField(required=False, allow_blank=True, max_length=4000)
    summary_max_tokens = serializers.IntegerField(required=False, min_value=100, max_value=32_000)
    summarizer_model = serializers.RegexField(
        MODEL_NAME,
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="003 summarizerModel: the model the summary is asked of, on the configured provider "
        "(empty: its own model, LLM_MODEL). Also for hierarchical.",
    )
    template_name = serializers.ChoiceField(
        choices=list(SUMMARY_TEMPLATES),
        required=False,
        help_text="003 templateName: the named summary prompt (summaries only; not for hierarchical).",
    )


class FallbackField(serializers.Field):
    """`summarize_fallback`: false (never), true (defaults) or an object of summarize options."""

    options = SummarizeFallbackInput  # what the schema shows for the object (memoryapp.api.schema)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool):
            return data
        if isinstance(data, dict):
            return validated(SummarizeFallbackInput, data)
        raise serializers.ValidationError("summarize_fallback must be true, false or an object of options.")

    def to_representation(self, value: Any) -> Any:  # pragma: no cover - input only
        return value


class CompactInput(SummarizeFallbackInput):
    strategy = serializers.ChoiceField(choices=STRATEGY_NAMES)
    # clear-old-tool-results
    keep_tool_uses = serializers.IntegerField(required=False, min_value=0, max_value=10_000)
    exclude_tools = serializers.ListField(child=serializers.CharField(max_length=200), required=False, max_length=100)
    clear_at_least = serializers.IntegerField(required=False, min_value=0, max_value=10_000_000)
    clear_tool_inputs = serializers.BooleanField(required=False)
    externalize = serializers.BooleanField(required=False)
    read_result_tool_name = serializers.CharField(required=False, allow_null=True, max_length=100)
    summarize_fallback = FallbackField(required=False)
    context_window = serializers.IntegerField(required=False, min_value=0, max_value=100_000_000)
    trigger_ratio = serializers.FloatField(required=False, min_value=0.01, max_value=1.0)
    # hierarchical
    keep_recent = serializers.IntegerField(required=False, min_value=0, max_value=10_000)
    keep_recent_tokens = serializers.IntegerField(required=False, min_value=0, max_value=10_000_000, allow_null=True)
    chapter_tokens = serializers.IntegerField(required=False, min_value=200, max_value=200_000)
    chapter_concurrency = serializers.IntegerField(required=False, min_value=1, max_value=8)
    chapters_per_arc = serializers.IntegerField(required=False, min_value=1, max_value=100)
    arcs_per_saga = serializers.IntegerField(required=False, min_value=1, max_value=100)
    atoms_max_tokens = serializers.IntegerField(required=False, min_value=100, max_value=32_000)
    # custom
    name = serializers.CharField(required=False, max_length=200)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        # `async` is a Python keyword, so it cannot be a class attribute.
        fields["async"] = serializers.BooleanField(required=False)
        return fields


class ExtractInput(StrictSerializer):
    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        fields["async"] = serializers.BooleanField(required=False)
        return fields


class ThreadCompactView(APIView):
    """Compact a thread's active branch with a strategy; the clearing tier runs in the request.

    `async` (default: false for clear-old-tool-results, true for the model-backed strategies)
    runs it as a job and answers 202 with the job run. Run in the request, a model that fails
    fails the run and answers 502 `compaction_failed` with the run's error.
    """

    @extend_schema(
        request=CompactInput,
        responses={
            200: OpenApiResponse(CompactionSkippedOut, description="Ran in the request: nothing to compact."),
            201: OpenApiResponse(CompactedOut, description="Ran in the request: a compaction entry was added."),
            202: OpenApiResponse(JobAcceptedOut, description="Sent as a job."),
            502: MODEL_FAILED,
        },
    )
    def post(self, request: Request, thread_id: str) -> Response:
        agent = request_agent(request)
        thread = thread_for_agent(agent=agent, external_id=thread_id)
        data = validated(CompactInput, request.data)
        strategy = data.pop("strategy")
        run_async = data.pop("async", strategy != CLEAR_TOOL_RESULTS)
        with run_causing(agent=agent, thread=thread, run_id=request_run_id(request)):
            if run_async:
                run = compaction_request(thread=thread, strategy=strategy, options=data, actor=_actor(request))
                run.refresh_from_db()
                return Response({"job_run": job_run_json(run)}, status=status.HTTP_202_ACCEPTED)
            try:
                run, outcome = compaction_now(thread=thread, strategy=strategy, options=data, actor=_actor(request))
            except ModelError as exc:  # not ModelUnavailable: compaction_job skips the run for it
                raise ModelFailed("compaction_failed", f"Compaction ({strategy})", exc) from exc
        body: dict[str, Any] = {"job_run": job_run_json(run), "strategy": strategy}
        if outcome is None or outcome.entry is None:
            reason = (run.result or {}).get("skipped") or (outcome.reason if outcome else "")
            body.update(compacted=False, reason=reason)
            if outcome is not None and outcome.notes:
                body["partial"] = "; ".join(outcome.notes)
            return Response(body, status=status.HTTP_200_OK)
        body.update(outcome.as_result())
        body["entry"] = entry_json(outcome.entry, thread.external_id)
        return Response(body, status=status.HTTP_201_CREATED)


class ThreadExtractView(APIView):
    """Extract memory items from a thread's new entries: a job (202), or now with `async: false`
    (200; 502 `extraction_failed` with the failed run's error when every window failed or the
    model did)."""

    @extend_schema(
        request=ExtractInput,
        responses={
            200: OpenApiResponse(ExtractionOut, description="Ran in the request (async: false)."),
            202: OpenApiResponse(JobAcceptedOut, description="Sent as a job."),
            502: MODEL_FAILED,
        },
    )
    def post(self, request: Request, thread_id: str) -> Response:
        agent = request_agent(request)
        thread = thread_for_agent(agent=agent, external_id=thread_id)
        data = validated(ExtractInput, request.data if request.data else {})
        with run_causing(agent=agent, thread=thread, run_id=request_run_id(request)):
            if data.get("async", True):
                run = extraction_request(thread=thread, actor=_actor(request))
                run.refresh_from_db()
                return Response({"job_run": job_run_json(run)}, status=status.HTTP_202_ACCEPTED)
            try:
                run, outcome = extraction_now(thread=thread, actor=_actor(request))
            except (ExtractionFailed, ModelError) as exc:  # ModelUnavailable skips the run instead
                raise ModelFailed("extraction_failed", "Extraction", exc) from exc
        body: dict[str, Any] = {"job_run": job_run_json(run)}
        if outcome is not None:
            body["result"] = outcome.as_result()
            body["item_ids"] = outcome.item_ids
        return Response(body, status=status.HTTP_200_OK)


def _is_tool_result(entry: Entry) -> bool:
    return entry.type == EntryType.TOOL_RESULT or entry.role == Role.TOOL


class ToolResultView(APIView):
    """The content behind a cleared tool result's handle (what the `read_result` tool returns)."""

    @extend_schema(responses={200: ToolResultOut})
    def get(self, request: Request, handle: str) -> Response:
        entry = entry_for_agent(agent=request_agent(request), entry_id=handle)
        # A turn screening holds stays out of the model's reach until released (as ToolScope.tool_result).
        if not _is_tool_result(entry) or entry.held_at is not None:
            raise NotFound("Tool result")
        return Response(ToolResultOut(entry).data)


# --- automatic compaction settings ---------------------------------------------------------------


class AutoCompactionOut(OutputSerializer):
    enabled = serializers.BooleanField(help_text="Compact the agent's threads when they pass the trigger.")
    context_window = serializers.IntegerField(help_text="The window of the agent's model, in tokens.")
    trigger_ratio = serializers.FloatField(help_text="The share of the window at which a thread is compacted.")
    trigger_tokens = serializers.IntegerField(help_text="context_window * trigger_ratio.")
    strategy = serializers.ChoiceField(choices=AutoCompactionStrategy.choices)
    keep_recent = serializers.IntegerField(help_text="Trailing entries kept verbatim.")
    summarizer_model = serializers.CharField(allow_blank=True, help_text="Empty: the provider's own model.")
    template_name = serializers.CharField(allow_blank=True, help_text="Empty: the default summary prompt.")
    pre_step = serializers.BooleanField(help_text="Also compact in the context request, before the next model step.")
    message_threshold = serializers.IntegerField(
        allow_null=True,
        help_text="Also compact once the history holds this many entries, whichever comes first (null: off).",
    )


def _auto_json(config: AutoCompaction) -> dict[str, Any]:
    return dict(AutoCompactionOut({**config.as_json(), "trigger_tokens": config.trigger_tokens}).data)


class AutoCompactionInput(StrictSerializer):
    """Only the settings given change. A thread's settings take null: back to its agent's."""

    enabled = serializers.BooleanField(required=False)
    context_window = serializers.IntegerField(required=False, min_value=1, max_value=MAX_CONTEXT_WINDOW)
    trigger_ratio = serializers.FloatField(required=False, min_value=0.0001, max_value=1.0)
    strategy = serializers.ChoiceField(choices=AutoCompactionStrategy.choices, required=False)
    keep_recent = serializers.IntegerField(required=False, min_value=0, max_value=MAX_KEEP_RECENT)
    summarizer_model = serializers.RegexField(MODEL_NAME, required=False, allow_blank=True, max_length=200)
    template_name = serializers.ChoiceField(choices=["", *SUMMARY_TEMPLATES], required=False)
    pre_step = serializers.BooleanField(required=False)
    # Null on the agent's: by tokens only; on a thread's: back to the agent's (as every setting).
    message_threshold = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_MESSAGE_THRESHOLD
    )


class ThreadAutoCompactionInput(AutoCompactionInput):
    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        for field in fields.values():
            field.allow_null = True
        return fields


class ThreadAutoCompactionOut(OutputSerializer):
    thread_id = serializers.CharField()
    own = JsonObjectField(help_text="The thread's own settings (only those it sets).")
    effective = AutoCompactionOut(help_text="What the thread gets: its agent's settings with its own over them.")


class AgentAutoCompactionView(APIView):
    """The agent's automatic compaction: after appends, a thread whose active branch holds
    `context_window * trigger_ratio` tokens or more, or `message_threshold` entries (when set),
    gets a compaction job with `strategy` (debounced; one at a time per thread; checked again when it runs)."""

    @extend_schema(responses={200: AutoCompactionOut})
    def get(self, request: Request) -> Response:
        return Response(_auto_json(agent_compaction_settings(agent=request_agent(request))))

    @extend_schema(request=AutoCompactionInput, responses={200: AutoCompactionOut})
    def patch(self, request: Request) -> Response:
        data = validated(AutoCompactionInput, request.data)
        config = agent_compaction_settings_set(agent=request_agent(request), values=data, actor=_actor(request))
        return Response(_auto_json(config))


class ThreadAutoCompactionView(APIView):
    """A thread's own automatic compaction settings, over its agent's (null: back to the agent's)."""

    def _body(self, thread: Any, config: AutoCompaction) -> dict[str, Any]:
        own = thread.compaction if isinstance(thread.compaction, dict) else {}
        return {"thread_id": thread.external_id, "own": own, "effective": _auto_json(config)}

    @extend_schema(responses={200: ThreadAutoCompactionOut})
    def get(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        return Response(self._body(thread, thread_auto_compaction(thread=thread)))

    @extend_schema(request=ThreadAutoCompactionInput, responses={200: ThreadAutoCompactionOut})
    def patch(self, request: Request, thread_id: str) -> Response:
        thread = thread_for_agent(agent=request_agent(request), external_id=thread_id)
        data = validated(ThreadAutoCompactionInput, request.data)
        config = thread_compaction_set(thread=thread, values=data, actor=_actor(request))
        return Response(self._body(thread, config))
