"""Admin of export requests (a person's access request), for privacy officers: the list with each
request's progress redrawn while it runs, the form to file one, its page, and the archive's download
(streamed from disk, permission-checked, audited). Reviewers and operators do not see them at all."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.widgets import FilteredSelectMultiple
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from governance.export.services import (
    ExportRetryRefused,
    export_archive_path,
    export_download_audit,
    export_request_create,
    export_request_retry,
    person_user_id_check,
)
from governance.models import ExportRequest
from governance.staff.adminlog import NamelessAdminLog
from governance.staff.lists import FullWidthList, cell_text, moment
from governance.staff.progress import progress_bar
from memoryapp.errors import DomainError
from memoryapp.models import Agent


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


def archive_response(request: HttpRequest, export: ExportRequest) -> FileResponse:
    """The archive streamed from disk as an attachment; the download is audited. 404 until it is ready."""
    path = export_archive_path(export)
    if path is None:
        raise Http404("This export has no archive (yet).")
    export_download_audit(request=export, actor=_actor(request))
    response = FileResponse(path.open("rb"), as_attachment=True, filename=f"export-{export.pk}.zip")
    response["Cache-Control"] = "no-store"
    return response


def _agent_slugs_attach(exports: list[ExportRequest]) -> None:
    """Give each request `agent_slugs`: its agents' slugs in its order (a deleted agent by its id)."""
    wanted = {pk for export in exports for pk in export.agent_ids}
    slugs = dict(Agent.objects.filter(pk__in=wanted).values_list("pk", "slug")) if wanted else {}
    for export in exports:
        export.agent_slugs = [slugs.get(pk, f"#{pk} (gone)") for pk in export.agent_ids]  # type: ignore[attr-defined]


def _outcome_tell(request: HttpRequest, pk: int) -> None:
    """The message after filing: done (with its size), failed (with why), or waiting for a worker."""
    export = ExportRequest.objects.filter(pk=pk).first()
    if export is None:
        return
    if export.status == ExportRequest.Status.DONE:
        messages.success(request, f"Export #{pk} is done: its archive is ready to download.")
    elif export.status == ExportRequest.Status.FAILED:
        messages.error(request, f"Export #{pk} failed: {export.error or 'see its job run'}.")
    elif export.status == ExportRequest.Status.RUNNING:
        messages.success(request, f"Export #{pk} is running: its progress shows below.")
    else:
        messages.success(request, f"Export #{pk} is queued: a worker will write its archive.")


class _AgentsChooser(FilteredSelectMultiple):
    """The admin's two lists with a filter box, in a box of their own (as the admin wraps a related
    field's widget): its floating lists otherwise float left of the field's label."""

    def render(self, name: str, value: Any, attrs: Any = None, renderer: Any = None) -> SafeString:
        return format_html('<div class="related-widget-wrapper">{}</div>', super().render(name, value, attrs, renderer))


class ExportRequestForm(ModelForm):  # type: ignore[type-arg]
    agents = forms.ModelMultipleChoiceField(
        queryset=Agent.objects.order_by("slug"),
        required=False,
        # Hundreds of agents: the admin's two lists with a filter box, not a bare multiple select.
        widget=_AgentsChooser("agents", is_stacked=False),
        help_text="Leave empty to look through every agent.",
    )

    class Meta:
        model = ExportRequest
        fields = ("user_id", "include_vectors")
        help_texts = {
            "user_id": "The person's id as the agents know it (a thread's or an item's person).",
            "include_vectors": "Add the embeddings of their entries and items (vectors.jsonl, id and vector): "
            "derived from words the archive holds already, large, and of use only with the same model.",
        }

    def clean_user_id(self) -> str:
        try:
            return person_user_id_check(self.cleaned_data.get("user_id"))
        except DomainError as exc:
            raise forms.ValidationError(exc.message) from None


@admin.register(ExportRequest)
class ExportRequestAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):  # type: ignore[type-arg]
    form = ExportRequestForm
    list_display = (
        "id",
        "person",
        "status_shown",
        "progress_shown",
        "agents_listed",
        "requested_by_shown",
        "created",
        "archive",
    )
    list_display_links = ("id", "person")
    list_filter = ("status",)
    search_fields = ("=user_id", "=requested_by")
    list_select_related = ("job_run",)
    show_full_result_count = False
    actions = ["run_again"]
    change_list_template = "admin/governance/exportrequest/change_list.html"
    change_form_template = "admin/governance/exportrequest/change_form.html"
    detail_fields = (
        "user_id",
        "agents_shown",
        "include_vectors",
        "status_shown",
        "progress_shown",
        "requested_by",
        "created_at",
        "finished_at",
        "archive",
        "size_shown",
        "manifest_sha256",
        "counts_shown",
        "job_run_shown",
        "error",
    )

    # Filed through the service, never edited; deleting one would leave its archive behind.
    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_fields(self, request: HttpRequest, obj: ExportRequest | None = None) -> Any:
        return self.detail_fields if obj is not None else ("user_id", "agents", "include_vectors")

    def get_readonly_fields(self, request: HttpRequest, obj: ExportRequest | None = None) -> Any:
        return self.detail_fields if obj is not None else ()

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """`?user_id=...&agents=1,2`: what "export this person" on a thread's or an item's page fills in."""
        initial: dict[str, Any] = {"user_id": request.GET.get("user_id", "")}
        agents = [int(part) for part in request.GET.get("agents", "").split(",") if part.strip().isdigit()]
        if agents:
            initial["agents"] = agents
        return initial

    def save_model(self, request: HttpRequest, obj: ExportRequest, form: Any, change: bool) -> None:
        if change:
            raise PermissionDenied  # nothing of a request is edited
        filed = export_request_create(
            user_id=form.cleaned_data["user_id"],
            agent_ids=[agent.pk for agent in form.cleaned_data.get("agents") or ()],
            include_vectors=bool(form.cleaned_data.get("include_vectors")),
            actor=_actor(request),
        )
        obj.pk = filed.pk
        obj.refresh_from_db()

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None  # the audit trail records the request (export.request), by id only

    def response_add(self, request: HttpRequest, obj: ExportRequest, post_url_continue: str | None = None) -> Any:
        """Back to the list, saying what became of the request. Its job is sent after the commit (and
        run there at once by an eager worker), so the message is written after the job's sending."""
        transaction.on_commit(lambda: _outcome_tell(request, obj.pk))
        return HttpResponseRedirect(reverse("admin:governance_exportrequest_changelist"))

    # --- cells ---

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The page's requests with their agents' slugs, read in one query for the whole page."""
        changelist = super().get_changelist_instance(request)
        changelist.result_list = list(changelist.result_list)
        _agent_slugs_attach(changelist.result_list)
        return changelist

    @admin.display(description="person", ordering="user_id")
    def person(self, obj: ExportRequest) -> SafeString:
        if not obj.user_id:
            return format_html('<span class="gone">{}</span>', "(erased)")
        return cell_text(obj.user_id, 22)

    @admin.display(description="status", ordering="status")
    def status_shown(self, obj: ExportRequest) -> SafeString:
        """What became of the request. An export whose person was erased since (exports_forget_person)
        did not fail: its archive was removed on purpose, and it names no one any more."""
        if obj.status == ExportRequest.Status.FAILED and not obj.user_id:
            return format_html('<span class="ex-status ex-erased">{}</span>', "Removed: the person was erased")
        return format_html('<span class="ex-status ex-{}">{}</span>', obj.status, obj.get_status_display())

    @admin.display(description="requested by", ordering="requested_by")
    def requested_by_shown(self, obj: ExportRequest) -> SafeString:
        return cell_text(obj.requested_by.removeprefix("staff:"), 16)

    @admin.display(description="agents")
    def agents_shown(self, obj: ExportRequest) -> str:
        if not obj.agent_ids:
            return "every agent"
        if not hasattr(obj, "agent_slugs"):
            _agent_slugs_attach([obj])
        return ", ".join(obj.agent_slugs)  # type: ignore[attr-defined]

    @admin.display(description="agents")
    def agents_listed(self, obj: ExportRequest) -> SafeString:
        """One agent by its slug, more by their number, all of them on hover (a request may name dozens)."""
        if not obj.agent_ids:
            return format_html("{}", "every agent")
        listed = self.agents_shown(obj)
        if len(obj.agent_ids) == 1:
            return cell_text(listed, 16)
        return format_html('<span class="cell-text" title="{}">{} agents</span>', listed, len(obj.agent_ids))

    @admin.display(description="progress")
    def progress_shown(self, obj: ExportRequest) -> SafeString:
        if obj.job_run is not None and obj.status in (ExportRequest.Status.QUEUED, ExportRequest.Status.RUNNING):
            return progress_bar(obj.job_run)  # redrawn by the page's script while the run runs
        if obj.progress_total:
            return format_html(
                '<span class="jr-progress"><progress value="{}" max="{}"></progress> <span class="jr-text">{} / {}</span></span>',
                obj.progress_done,
                obj.progress_total,
                obj.progress_done,
                obj.progress_total,
            )
        return mark_safe("—")

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: ExportRequest) -> SafeString:
        return moment(obj.created_at)

    @admin.display(description="archive")
    def archive(self, obj: ExportRequest) -> SafeString:
        if export_archive_path(obj) is None:
            return mark_safe("—")
        url = reverse("admin:governance_exportrequest_archive", args=[obj.pk])
        return format_html('<a class="export-download" href="{}">download</a> ({})', url, self.size_shown(obj))

    @admin.display(description="size")
    def size_shown(self, obj: ExportRequest) -> str:
        size = obj.archive_size or 0
        return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB" if size else "—"

    @admin.display(description="contents")
    def counts_shown(self, obj: ExportRequest) -> str:
        counts = obj.counts or {}
        return " · ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in counts.items()) if counts else "—"

    @admin.display(description="job run")
    def job_run_shown(self, obj: ExportRequest) -> SafeString:
        if obj.job_run_id is None:
            return mark_safe("—")
        url = reverse("admin:governance_jobrun_change", args=[obj.job_run_id])
        return format_html('<a href="{}">#{}</a>', url, obj.job_run_id)

    # --- run again, and the download ---

    @admin.action(description="Run the selected failed exports again", permissions=["change"])
    def run_again(self, request: HttpRequest, queryset: QuerySet[ExportRequest]) -> None:
        for export in queryset.order_by("pk"):
            try:
                export_request_retry(request=export, actor=_actor(request))
                messages.success(request, f"Export #{export.pk} is queued again.")
            except ExportRetryRefused as exc:
                messages.warning(request, str(exc))

    def get_urls(self) -> list[Any]:
        return [
            path(
                "<int:pk>/archive/",
                self.admin_site.admin_view(self.archive_view),
                name="governance_exportrequest_archive",
            ),
            *super().get_urls(),
        ]

    def archive_view(self, request: HttpRequest, pk: int) -> FileResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        export = ExportRequest.objects.filter(pk=pk).first()
        if export is None:
            raise Http404("No such export.")
        return archive_response(request, export)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "title": f"Export request #{object_id}", "show_save": False}
        context["show_save_and_continue"] = False
        context.update(show_save_and_add_another=False, show_delete=False)
        return super().change_view(request, object_id, form_url, extra_context=context)
