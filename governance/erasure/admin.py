"""Admin of erasure requests, for privacy officers: the list, the form that files one, the request's
page with its progress (refreshed while it runs), "run again" for a failed or blocked one, and the
report page (with its JSON, and its signed receipt when one was made).

Every change goes through governance.erasure (audited); the admin's own save and delete are off.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from governance.audit.chain import canonical_json
from governance.erasure.resume import requests_behind
from governance.erasure.services import (
    AUTO_RETRY_WAITS,
    EXCLUSION_REASONS,
    RETRYABLE,
    ErasureDryRun,
    erasure_auto_retry,
    erasure_dry_run,
    erasure_preview,
    erasure_request_file,
    erasure_request_retry,
    erasure_request_stalled,
)
from governance.models import ErasureRequest
from governance.staff.adminlog import NamelessAdminLog
from governance.staff.confirm import confirm_page, confirmed
from governance.staff.lists import FullWidthList, cell_text, moment
from memoryapp.errors import DomainError
from memoryapp.forgetting.mentions import GROUPS
from memoryapp.models import Agent
from memoryapp.subjects.erasing import erasures_marked

OPEN = (ErasureRequest.Status.QUEUED, ErasureRequest.Status.RUNNING)
# How the preview and the report name the erasure's counts (memoryapp.forgetting.person, in order).
COUNT_LABELS = {
    "threads": "threads about the person (deleted whole)",
    "entries_deleted": "entries deleted (theirs, and their messages in others' threads with the replies)",
    "entries_redacted": "entries redacted",
    "summaries": "compaction summaries removed",
    "items_purged": "memory items purged (theirs, and others' standing only on their words)",
    "items_trimmed": "memory items of others trimmed (lose the person's quotes)",
    "items_stale": "memory items marked stale",
    "facts": "facts (among the items purged)",
    "entities": "entities deleted",
    "file_versions": "memory file versions deleted or redacted",
    "playbook_rules": "playbook rules removed",
    "vectors": "vectors removed",
    "job_runs": "job runs naming them (scrubbed)",
    "access_rows_deleted": "access-log rows of their requests deleted",
    "access_rows_stripped": "access-log rows of others' requests losing their ids",
    "data_keys_destroyed": "data keys destroyed (encryption at rest)",
    "export_archives": "export archives deleted",
}


def count_rows(counts: dict[str, int]) -> list[tuple[str, int]]:
    """(label, count) of every count, those that are not zero first, in COUNT_LABELS's order."""
    order = list(COUNT_LABELS)
    keys = sorted(counts, key=lambda k: (counts[k] == 0, order.index(k) if k in order else len(order), k))
    return [(COUNT_LABELS.get(k, k.replace("_", " ")), counts[k]) for k in keys]


def marks_shown(*, user_id: str | None = None, agent_ids: list[int] | None = None) -> list[dict[str, Any]]:
    """The people marked as being erased (memoryapp.subjects.erasing), as the person's page, the
    people page and a request's page list them: in progress, or interrupted with what finishes it
    (its request's page, else the resume sweep: governance.erasure.resume)."""
    marks = erasures_marked(user_id=user_id, agent_ids=agent_ids)
    slugs = dict(Agent.objects.filter(pk__in={m.agent_id for m in marks}).values_list("pk", "slug"))
    behinds = requests_behind(mark for mark in marks if not mark.running)
    shown = []
    for mark in marks:
        behind = behinds.get((mark.agent_id, mark.user_id))
        shown.append(
            {
                "mark": mark,
                "slug": slugs.get(mark.agent_id, f"#{mark.agent_id}"),
                "request": behind,
                "request_url": reverse("admin:governance_erasurerequest_change", args=[behind.pk]) if behind else "",
                "person_url": reverse("admin-person") + "?" + urlencode({"id": mark.user_id}),
            }
        )
    return shown


# Rows of each table of shared memory the confirm step lists (the rest counted): a person quoted
# across an agent's memory may stand under thousands of others' items, and the choice and the
# button come after these tables.
SHARED_ROWS_SHOWN = 25


def shared_shown(preview: ErasureDryRun) -> dict[str, Any]:
    """The confirm step's view of the memory shared with others that changes: the first rows of
    each table and how many more, and the items counted by outcome."""
    items, files = preview.shared_items, preview.shared_files
    return {
        "shared_items": items[:SHARED_ROWS_SHOWN],
        "shared_items_more": max(0, len(items) - SHARED_ROWS_SHOWN),
        "shared_items_purged": sum(1 for i in items if i.purged),
        "shared_items_trimmed": sum(1 for i in items if not i.purged),
        "shared_items_scopes": len({(i.agent, i.scope) for i in items}),
        "shared_files": files[:SHARED_ROWS_SHOWN],
        "shared_files_more": max(0, len(files) - SHARED_ROWS_SHOWN),
    }


# Seconds between refreshes of a request's page while it runs.
REFRESH_SECONDS = 2


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


EXCLUDE_PREFIX = "exclude_"


class ErasureRequestForm(forms.Form):
    user_id = forms.CharField(
        label="Person (user id)",
        max_length=128,
        help_text="The id the agents know the person by (a thread's person, an item's user id).",
    )
    identifiers = forms.CharField(
        label="Other identifiers",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One a line, e.g. an e-mail address: the check after the erasure searches every table for "
        "them too. Kept on this request only.",
    )
    agents = forms.ModelMultipleChoiceField(
        queryset=Agent.objects.order_by("slug"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None chosen: every agent.",
    )
    mode = forms.ChoiceField(choices=ErasureRequest.Mode.choices, initial=ErasureRequest.Mode.ERASE)
    legal_basis = forms.CharField(
        label="Legal basis",
        max_length=200,
        required=False,
        help_text="e.g. GDPR Art. 17(1)(a). Kept on this request, never in the audit trail.",
    )
    reason = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Kept on this request, never in the audit trail.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The confirm step's choices: a group of mentions is erased, or left out for a typed reason.
        for group in GROUPS:
            self.fields[f"{EXCLUDE_PREFIX}{group}"] = forms.ChoiceField(
                choices=[("", "erase it"), *((r, f"keep it: {r.replace('_', ' ')}") for r in EXCLUSION_REASONS)],
                required=False,
                label=f"Mentions: {group}",
            )

    def excluded(self) -> dict[str, str]:
        """The groups the officer left out, with their reasons (once the form is valid)."""
        return {
            group: self.cleaned_data[f"{EXCLUDE_PREFIX}{group}"]
            for group in GROUPS
            if self.cleaned_data.get(f"{EXCLUDE_PREFIX}{group}")
        }

    def request_fields(self) -> list[Any]:
        """The request's own fields (the confirm step carries them hidden; its exclusions are shown)."""
        return [self[name] for name in self.fields if not name.startswith(EXCLUDE_PREFIX)]

    def clean_identifiers(self) -> list[str]:
        text = self.cleaned_data.get("identifiers") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]


def _outcome_tell(request: HttpRequest, pk: int) -> None:
    """The message after filing, read after the filing's commit (which sends the job: an eager
    worker has run it by now): done, stopped by a hold, failed, or sent to the workers."""
    filed = ErasureRequest.objects.get(pk=pk)
    if filed.status == ErasureRequest.Status.DONE:
        messages.success(request, f"Erasure request #{pk} filed and done: its report says what was erased.")
    elif filed.status == ErasureRequest.Status.BLOCKED:
        messages.warning(request, f"Erasure request #{pk} filed and stopped by a legal hold: nothing was erased.")
    elif filed.status == ErasureRequest.Status.FAILED:
        messages.error(request, f"Erasure request #{pk} filed and failed: {filed.error or 'see its job run'}.")
    else:
        messages.success(request, f"Erasure request #{pk} filed; its job was sent to the workers.")


def progress_bar(obj: ErasureRequest) -> SafeString:
    if obj.progress_total:
        percent = int(100 * obj.progress_done / obj.progress_total)
        return format_html(
            '<progress class="er-progress" value="{}" max="{}"></progress> <span class="er-text">{} / {} · {}%</span>',
            obj.progress_done,
            obj.progress_total,
            obj.progress_done,
            obj.progress_total,
            percent,
        )
    if obj.status == ErasureRequest.Status.RUNNING:
        return format_html('<progress class="er-progress"></progress> <span class="er-text">{}</span>', obj.phase)
    return format_html('<span class="er-text">{}</span>', "—")


@admin.register(ErasureRequest)
class ErasureRequestAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    list_display = ("number", "status_shown", "progress", "person", "mode", "agents_shown", "asked_by", "asked")
    list_display_links = ("number",)
    list_filter = ("status", "mode")
    search_fields = ("=user_id",)
    search_help_text = "The person's exact user id."
    ordering = ("-created_at",)
    show_full_result_count = False
    list_select_related = ("requested_by",)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The page shows; nothing on it is edited. Running again needs `change` (retry_view).
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the record of an erasure stays

    def may_retry(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("governance.change_erasurerequest"))

    @admin.display(description="#", ordering="pk")
    def number(self, obj: ErasureRequest) -> str:
        return f"#{obj.pk}"

    @admin.display(description="status", ordering="status")
    def status_shown(self, obj: ErasureRequest) -> SafeString:
        return format_html('<span class="er-status er-{}">{}</span>', obj.status, obj.get_status_display())

    @admin.display(description="progress")
    def progress(self, obj: ErasureRequest) -> SafeString:
        return progress_bar(obj)

    @admin.display(description="person", ordering="user_id")
    def person(self, obj: ErasureRequest) -> SafeString:
        return cell_text(obj.user_id, 28)

    @admin.display(description="agents")
    def agents_shown(self, obj: ErasureRequest) -> str:
        return f"{len(obj.agent_ids)} chosen" if obj.agent_ids else "all"

    @admin.display(description="asked by", ordering="requested_by_name")
    def asked_by(self, obj: ErasureRequest) -> SafeString:
        return cell_text(obj.requested_by_name.removeprefix("staff:"), 20)

    @admin.display(description="asked", ordering="created_at")
    def asked(self, obj: ErasureRequest) -> SafeString:
        return moment(obj.created_at)

    def get_urls(self) -> list[Any]:
        own = [
            path(
                "<int:pk>/retry/",
                self.admin_site.admin_view(self.retry_view),
                name="governance_erasurerequest_retry",
            ),
            path(
                "<int:pk>/report/",
                self.admin_site.admin_view(self.report_view),
                name="governance_erasurerequest_report",
            ),
            path(
                "<int:pk>/report.json",
                self.admin_site.admin_view(self.report_json_view),
                name="governance_erasurerequest_report_json",
            ),
        ]
        return own + super().get_urls()

    def _context(self, request: HttpRequest, **more: Any) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.opts, "has_view_permission": True, **more}

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None) -> Any:
        """File a request: the form, then the request's page (its job runs after the commit)."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            form = ErasureRequestForm(request.POST)
            if form.is_valid() and not request.POST.get("confirmed"):
                # Confirm with consequences: what would go now, and the holds that would stop it.
                data = form.cleaned_data
                try:
                    preview = erasure_preview(
                        user_id=data["user_id"],
                        agent_ids=[a.pk for a in data["agents"]],
                        mode=data["mode"],
                        identifiers=data["identifiers"],
                    )
                except DomainError as exc:
                    form.add_error(exc.field if exc.field in form.fields else None, exc.message)
                else:
                    context = self._context(
                        request,
                        title=f"Erase {data['user_id']}?",
                        form=form,
                        plan=count_rows(preview.counts),
                        preview=preview,
                        holds=preview.holds,
                        agents=[a.slug for a in data["agents"]],
                        mentions=[(g, form[f"{EXCLUDE_PREFIX}{g.group}"]) for g in preview.mentions],
                        is_nav_sidebar_enabled=False,
                        **shared_shown(preview),
                    )
                    return TemplateResponse(request, "admin/governance/erasurerequest/confirm.html", context)
            elif form.is_valid():
                data = form.cleaned_data
                try:
                    filed = erasure_request_file(
                        user_id=data["user_id"],
                        identifiers=data["identifiers"],
                        agent_ids=[a.pk for a in data["agents"]],
                        mode=data["mode"],
                        legal_basis=data["legal_basis"],
                        reason=data["reason"],
                        requested_by=request.user,
                        actor=_actor(request),
                        excluded=form.excluded(),
                    )
                except DomainError as exc:
                    form.add_error(exc.field if exc.field in form.fields else None, exc.message)
                else:
                    _outcome_tell(request, filed.pk)
                    return HttpResponseRedirect(reverse("admin:governance_erasurerequest_change", args=[filed.pk]))
        else:
            form = ErasureRequestForm(initial={"user_id": request.GET.get("user_id", "")[:128]})
        context = self._context(request, title="File an erasure request", form=form, add=True)
        return TemplateResponse(request, "admin/governance/erasurerequest/add.html", context)

    def _request_to_show(self, request: HttpRequest, object_id: str) -> ErasureRequest:
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"No erasure request with the id {object_id!r}.")
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        return obj

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The request: who, what, its progress (the page refreshes while it runs), run again."""
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET"])
        obj = self._request_to_show(request, object_id)
        agents = list(Agent.objects.filter(pk__in=obj.agent_ids).order_by("slug").values_list("slug", flat=True))
        context = self._context(
            request,
            title=f"Erasure request #{obj.pk}",
            original=obj,
            erasure=obj,
            agents=agents,
            progress=progress_bar(obj),
            running=obj.status in OPEN,
            refresh=REFRESH_SECONDS,
            stalled=erasure_request_stalled(obj),
            auto_retry=erasure_auto_retry(obj),
            auto_retries=len(AUTO_RETRY_WAITS),
            may_retry=self.may_retry(request) and (obj.status in RETRYABLE or erasure_request_stalled(obj)),
            run_url=reverse("admin:governance_jobrun_change", args=[obj.job_run_id]) if obj.job_run_id else "",
            marks=[]
            if obj.status == ErasureRequest.Status.DONE
            else marks_shown(user_id=obj.user_id, agent_ids=obj.agent_ids or None),
        )
        return TemplateResponse(request, "admin/governance/erasurerequest/request.html", context)

    def retry_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self._request_to_show(request, str(pk))
        if not self.may_retry(request):
            raise PermissionDenied
        if obj.status not in RETRYABLE and not erasure_request_stalled(obj):
            # Not a confirm page (and its dry run of the whole erasure) for what cannot run again.
            messages.error(request, f"Erasure request #{obj.pk} is {obj.get_status_display()}: it is not run again.")
            return HttpResponseRedirect(reverse("admin:governance_erasurerequest_change", args=[obj.pk]))
        if not confirmed(request):
            return self._retry_confirm(request, obj)
        try:
            erasure_request_retry(request=obj, actor=_actor(request))
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Erasure request #{obj.pk} runs again.")
        return HttpResponseRedirect(reverse("admin:governance_erasurerequest_change", args=[obj.pk]))

    def _retry_confirm(self, request: HttpRequest, obj: ErasureRequest) -> HttpResponse:
        """Before running a request again: what it would erase now (its dry run, counted afresh: the
        agents wrote on since it stopped) and the holds still in the way."""
        page = reverse("admin:governance_erasurerequest_change", args=[obj.pk])
        try:
            preview = erasure_dry_run(
                user_id=obj.user_id,
                agent_ids=obj.agent_ids,
                mode=obj.mode,
                identifiers=obj.identifiers or [],
                exclude=list(obj.excluded or {}),
            )
        except DomainError as exc:
            messages.error(request, exc.message)
            return HttpResponseRedirect(page)
        holds = ", ".join(f"#{h}" for h in preview.holds)
        shared = [
            ("memory files shared with others that change (playbooks, notes)", len(preview.shared_files)),
            ("playbook rules of shared files removed", sum(len(f.rules_removed) for f in preview.shared_files)),
            ("memory items of other scopes purged or trimmed", len(preview.shared_items)),
        ]
        return confirm_page(
            request,
            self,
            title=f"Run erasure request #{obj.pk} again?",
            verb=f"Run erasure request #{obj.pk} again",
            objects=[(f"#{obj.pk}: {obj.mode} {obj.user_id} ({obj.get_status_display()})", page)],
            counted=[r for r in count_rows(preview.counts) + shared if r[1]]
            + [r for r in count_rows(preview.counts) + shared if not r[1]],
            warning=(
                f"Legal hold{'s' if len(preview.holds) > 1 else ''} {holds} still in force: the request will stop "
                "again before changing anything."
                if preview.holds
                else (
                    "Nothing is held about this person any more: the run will erase nothing." if preview.nothing else ""
                )
            ),
            action_url=reverse("admin:governance_erasurerequest_retry", args=[obj.pk]),
            cancel_url=page,
        )

    def report_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        obj = self._request_to_show(request, str(pk))
        if not obj.report:
            messages.info(request, f"Erasure request #{obj.pk} has no report yet ({obj.get_status_display()}).")
            return HttpResponseRedirect(reverse("admin:governance_erasurerequest_change", args=[obj.pk]))
        report = obj.report
        scan = report.get("scan", {})
        counts = count_rows({k: v for k, v in (report.get("counts") or {}).items() if isinstance(v, int)})
        context = self._context(
            request,
            title=f"Erasure report of request #{obj.pk}",
            original=obj,
            erasure=obj,
            report=report,
            counts=counts,
            tables=scan.get("tables", []),
            findings=scan.get("findings", []),
            not_scanned=sorted((scan.get("not_scanned") or {}).items()),
        )
        return TemplateResponse(request, "admin/governance/erasurerequest/report.html", context)

    def report_json_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The report as a file: its bytes are the canonical JSON whose sha256 the audit chain holds;
        with a receipt, the signed receipt (`?receipt=1`)."""
        obj = self._request_to_show(request, str(pk))
        if not obj.report:
            raise Http404("No report yet.")
        if request.GET.get("receipt"):
            if not obj.receipt:
                raise Http404("This report was not signed.")
            body, name = json.dumps(obj.receipt, indent=2, sort_keys=True), f"erasure-{obj.pk}-receipt.json"
        else:
            body, name = canonical_json(obj.report), f"erasure-{obj.pk}-report.json"
        response = HttpResponse(body, content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
