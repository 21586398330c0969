"""The agent API of compaction, extraction and cleared tool results: thin views over the services.

POST /api/v1/threads/{id}/compact   {"strategy", ...options, "async"?}
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
from memoryapp.api.threads import EntryOut, entry_json
from memoryapp.compaction.plan import CLEAR_TOOL_RESULTS, STRATEGY_NAMES
from memoryapp.compaction.service import compaction_now, compaction_request
from memoryapp.errors import DomainError, NotFound
from memoryapp.extraction.service import ExtractionFailed, extraction_now, extraction_request
from memoryapp.llm.model import ModelError
from memoryapp.models import Entry
from memoryapp.models.choices import EntryType, Role
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
        if not _is_tool_result(entry):
            raise NotFound("Tool result")
        return Response(ToolResultOut(entry).data)
