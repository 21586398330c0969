from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html

from governance.audit import audit_verify
from governance.models import AuditRecord, JobRun


@admin.register(AuditRecord)
class AuditRecordAdmin(admin.ModelAdmin):
    list_display = ("seq", "at", "action", "actor", "agent_id", "thread_id", "subject", "outcome")
    list_filter = ("action",)
    search_fields = ("action", "actor", "subject", "thread_id")
    ordering = ("-seq",)  # newest first: what just happened is what staff come to check
    show_full_result_count = False
    change_list_template = "admin/governance/auditrecord/change_list.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[Any]:
        return [
            path("verify/", self.admin_site.admin_view(self.verify_view), name="governance_auditrecord_verify"),
            *super().get_urls(),
        ]

    def verify_view(self, request: HttpRequest) -> HttpResponse:
        # admin_view only asks for staff: reading the whole chain is for those who may read the audit.
        if not self.has_view_permission(request):
            raise PermissionDenied
        result = audit_verify()
        if result.ok:
            messages.success(
                request,
                f"Audit chain verified: {result.records} records, unbroken; "
                f"{result.anchors} anchors outside the database agree.",
            )
        else:
            messages.error(
                request,
                f"Audit chain BROKEN at seq {result.first_broken}: {result.reason} "
                f"({result.records} records checked, {result.anchors} anchors).",
            )
        return HttpResponseRedirect(reverse("admin:governance_auditrecord_changelist"))


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "kind",
        "status",
        "progress",
        "agent_id",
        "model_calls",
        "tokens",
        "cost",
        "created_at",
        "duration",
    )
    list_filter = ("status", "kind")
    search_fields = ("kind", "dedupe_key")
    show_full_result_count = False
    readonly_fields = [f.name for f in JobRun._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="progress")
    def progress(self, obj: JobRun) -> str:
        if not obj.progress_total:
            return str(obj.progress_done or "")
        pct = int(100 * obj.progress_done / obj.progress_total)
        return format_html(
            "<progress value='{}' max='{}'></progress> {}/{} ({}%)",
            obj.progress_done,
            obj.progress_total,
            obj.progress_done,
            obj.progress_total,
            pct,
        )

    @admin.display(description="model calls")
    def model_calls(self, obj: JobRun) -> int:
        return int((obj.usage or {}).get("calls", 0))

    @admin.display(description="tokens in/out")
    def tokens(self, obj: JobRun) -> str:
        usage = obj.usage or {}
        return f"{usage.get('input_tokens', 0)}/{usage.get('output_tokens', 0)}" if usage else ""

    @admin.display(description="cost (USD)")
    def cost(self, obj: JobRun) -> str:
        usage = obj.usage or {}
        return f"{usage['cost_usd']:.4f}" if usage.get("cost_usd") else ""

    @admin.display(description="took")
    def duration(self, obj: JobRun) -> str:
        if obj.started_at and obj.finished_at:
            return f"{(obj.finished_at - obj.started_at).total_seconds():.1f}s"
        return ""
