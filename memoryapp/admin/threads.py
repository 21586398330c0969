"""Admin of threads and entries: the thread list, a thread's tree, entry details.

Staff read conversations here; what they change goes through the thread services (so a delete
splices and audits, a redaction keeps the place): this module holds no rule of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from memoryapp.errors import DomainError
from memoryapp.models import Entry, Thread
from memoryapp.selectors.threads import ENTRY_LIGHT_DEFER, path_ids
from memoryapp.services.threads import (
    entry_delete,
    entry_redact,
    thread_delete,
    thread_metadata_check,
    thread_update,
)

# A thread page draws at most this many entries of the tree (the oldest first).
TREE_LIMIT = 2000
PREVIEW_CHARS = 120


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


class EstimatedCountPaginator(Paginator):
    """Counts of an unfiltered list from the planner's statistics, not a scan of the table.

    A filtered or searched list is counted exactly (its filters use indexes); the full list of a
    table of millions of rows would otherwise cost a sequential scan on every page view.
    """

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if isinstance(queryset, QuerySet) and not queryset.query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [queryset.model._meta.db_table],
                )
                row = cursor.fetchone()
            if row and row[0] and row[0] > 10_000:
                return int(row[0])
        return super().count


def preview(entry: Entry) -> str:
    text = (entry.text or "").replace("\n", " ")
    if not text and entry.event is not None:
        text = str(entry.event)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


@dataclass(frozen=True)
class TreeRow:
    entry: Entry
    depth: int
    on_active_path: bool
    is_leaf: bool
    branches: int  # children of this entry: more than one is a fork in the conversation
    url: str
    preview: str


def thread_tree_rows(thread: Thread, *, limit: int = TREE_LIMIT) -> tuple[list[TreeRow], bool]:
    """The thread's entries in tree order (depth first, older branches first), and whether cut.

    1. Load the oldest `limit` entries (light columns) and the ids of the active path.
    2. Group children by parent; roots are entries without a parent (or with one not loaded).
    3. Walk depth first with an explicit stack (a long thread would overflow recursion).
    """
    entries = list(Entry.objects.filter(thread=thread).defer(*ENTRY_LIGHT_DEFER).order_by("seq")[: limit + 1])
    cut = len(entries) > limit
    entries = entries[:limit]
    active = path_ids(thread=thread)
    loaded = {e.id for e in entries}
    children: dict[str | None, list[Entry]] = {}
    for entry in entries:
        parent = entry.parent_id if entry.parent_id in loaded else None
        children.setdefault(parent, []).append(entry)
    rows: list[TreeRow] = []
    stack: list[tuple[Entry, int]] = [(e, 0) for e in reversed(children.get(None, []))]
    while stack:
        entry, depth = stack.pop()
        kids = children.get(entry.id, [])
        rows.append(
            TreeRow(
                entry=entry,
                depth=depth,
                on_active_path=entry.id in active,
                is_leaf=entry.id == thread.active_leaf_id,
                branches=len(kids),
                # Quoted as the admin's own links are: it unquotes `_3A` and the like in a pk.
                url=reverse("admin:memoryapp_entry_change", args=[quote(entry.pk)]),
                preview=preview(entry),
            )
        )
        stack.extend((kid, depth + 1) for kid in reversed(kids))
    return rows, cut


class MetadataJSONField(forms.JSONField):
    """Shows back the text as typed when the form has errors: Django's field would decode it and
    write it out again, and a lone surrogate (`"\\ud800"`) cannot be written to the page (a 500)."""

    def bound_data(self, data: Any, initial: Any) -> Any:
        if self.disabled:
            return initial
        return InvalidJSONInput(data or "")


class ThreadAdminForm(forms.ModelForm):
    metadata = MetadataJSONField(required=False)

    class Meta:
        model = Thread
        fields = ("user_id", "metadata")

    def clean_metadata(self) -> dict[str, Any]:
        value = self.cleaned_data.get("metadata")
        if value is None:
            # `null` (or an empty box) would save nothing yet report success.
            raise forms.ValidationError("Metadata is a JSON object: {} for none.")
        try:
            return thread_metadata_check(value)
        except DomainError as exc:
            raise forms.ValidationError(exc.message) from exc


@admin.register(Thread)
class ThreadAdmin(admin.ModelAdmin):
    form = ThreadAdminForm
    list_display = ("external_id", "agent", "user_id", "entries_written", "forked_from_link", "updated_at")
    list_select_related = ("agent", "forked_from")
    search_fields = ("external_id", "user_id", "agent__slug")
    list_filter = ("agent",)
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    raw_id_fields = ("agent", "active_leaf", "forked_from")
    readonly_fields = (
        "agent",
        "external_id",
        "active_leaf",
        "forked_from",
        "next_seq",
        "fork_links",
        "extraction_mark",
        "created_at",
        "updated_at",
    )
    fields = (
        "agent",
        "external_id",
        "user_id",
        "metadata",
        "active_leaf",
        "forked_from",
        "fork_links",
        "next_seq",
        "extraction_mark",
        "created_at",
        "updated_at",
    )
    change_form_template = "admin/memoryapp/thread/change_form.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # agents create threads over the API

    @admin.display(description="forks")
    def fork_links(self, obj: Thread) -> str:
        forks = list(obj.forks.order_by("created_at").values_list("pk", "external_id")[:50])
        if not forks:
            return "-"
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            ((reverse("admin:memoryapp_thread_change", args=[pk]), name) for pk, name in forks),
        )

    @admin.display(description="extraction")
    def extraction_mark(self, obj: Thread) -> str:
        progress = obj.extraction or {}
        if not progress:
            return "not run yet"
        failed = progress.get("failed") or []
        retrying = f"; {len(failed)} window(s) to try again" if failed else ""
        return f"extracted through seq {progress.get('through_seq', 0)}{retrying}"

    @admin.display(description="entries written")
    def entries_written(self, obj: Thread) -> int:
        # next_seq counts every entry ever added: no COUNT(*) per row of the list.
        return obj.next_seq - 1

    @admin.display(description="forked from")
    def forked_from_link(self, obj: Thread) -> str:
        if obj.forked_from is None:
            return ""
        url = reverse("admin:memoryapp_thread_change", args=[obj.forked_from.pk])
        return format_html('<a href="{}">{}</a>', url, obj.forked_from.external_id)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = dict(extra_context or {})
        thread = self.get_object(request, object_id)
        if thread is not None:
            rows, cut = thread_tree_rows(thread)
            context.update({"tree_rows": rows, "tree_cut": cut, "tree_limit": TREE_LIMIT})
            context["can_run_jobs"] = self.has_change_permission(request, thread)
        return super().change_view(request, object_id, form_url, extra_context=context)

    def get_urls(self) -> list[Any]:
        own = [
            path("<int:pk>/compact/", self.admin_site.admin_view(self.compact_view), name="memoryapp_thread_compact"),
            path("<int:pk>/extract/", self.admin_site.admin_view(self.extract_view), name="memoryapp_thread_extract"),
        ]
        return own + super().get_urls()

    def _thread_for_job(self, request: HttpRequest, pk: int) -> Thread:
        thread = self.get_object(request, str(pk))
        if thread is None or request.method != "POST" or not self.has_change_permission(request, thread):
            raise PermissionDenied
        return thread

    def compact_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """ "Compact now": enqueue a compaction job of the thread (the service checks the strategy)."""
        from memoryapp.compaction.service import compaction_request

        thread = self._thread_for_job(request, pk)
        strategy = request.POST.get("strategy", "clear-old-tool-results")
        try:
            run = compaction_request(thread=thread, strategy=strategy, options={}, actor=_actor(request))
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Compaction ({strategy}) queued as job run #{run.pk}.")
        return HttpResponseRedirect(reverse("admin:memoryapp_thread_change", args=[thread.pk]))

    def extract_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """ "Extract now": enqueue the thread's extraction job."""
        from memoryapp.extraction.service import extraction_request

        thread = self._thread_for_job(request, pk)
        run = extraction_request(thread=thread, actor=_actor(request))
        messages.success(request, f"Extraction queued as job run #{run.pk}.")
        return HttpResponseRedirect(reverse("admin:memoryapp_thread_change", args=[thread.pk]))

    def save_model(self, request: HttpRequest, obj: Thread, form: Any, change: bool) -> None:
        thread_update(thread=obj, metadata=obj.metadata, user_id=obj.user_id, replace_metadata=True)

    def delete_model(self, request: HttpRequest, obj: Thread) -> None:
        thread_delete(thread=obj, actor=_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Thread]) -> None:
        for thread in queryset:
            thread_delete(thread=thread, actor=_actor(request))


@admin.register(Entry)
class EntryAdmin(admin.ModelAdmin):
    list_display = ("id", "thread", "seq", "type", "role", "short_text", "redacted", "created_at")
    list_select_related = ("thread",)
    list_filter = ("type", "role")
    search_fields = ("=id", "=thread__external_id")
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    raw_id_fields = ("agent", "thread", "parent")
    exclude = ("embedding", "search_vector")
    readonly_fields = (
        "id",
        "agent",
        "thread",
        "parent_link",
        "seq",
        "type",
        "role",
        "content",
        "text",
        "tool_calls",
        "tool_call_id",
        "tool_name",
        "sender_name",
        "token_count",
        "event",
        "metadata",
        "created_at",
        "content_hash",
        "redacted_at",
        "embedded_at",
    )
    fields = readonly_fields
    actions = ["redact_entries"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Entry]:
        return super().get_queryset(request).defer(*ENTRY_LIGHT_DEFER)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="parent")
    def parent_link(self, obj: Entry) -> str:
        if not obj.parent_id:
            return "(root)"
        url = reverse("admin:memoryapp_entry_change", args=[quote(obj.parent_id)])
        return format_html('<a href="{}">{}</a>', url, obj.parent_id)

    @admin.display(description="text")
    def short_text(self, obj: Entry) -> str:
        return preview(obj)

    @admin.display(description="redacted", boolean=True)
    def redacted(self, obj: Entry) -> bool:
        return obj.redacted_at is not None

    def has_redact_permission(self, request: HttpRequest) -> bool:
        # Redacting destroys what was said: it takes the delete permission, not a view of entries.
        return bool(request.user.has_perm("memoryapp.delete_entry"))

    @admin.action(description="Redact selected entries (keeps their place in the tree)", permissions=["redact"])
    def redact_entries(self, request: HttpRequest, queryset: QuerySet[Entry]) -> None:
        done = 0
        for entry in queryset.select_related("thread"):
            try:
                entry_redact(entry=entry, reason="redacted by staff", actor=_actor(request))
                done += 1
            except DomainError as exc:
                self.message_user(request, f"{entry.pk}: {exc.message}", messages.WARNING)
        self.message_user(request, f"Redacted {done} entries.")

    def delete_model(self, request: HttpRequest, obj: Entry) -> None:
        entry_delete(entry=obj, actor=_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Entry]) -> None:
        for entry in queryset.select_related("thread").order_by("-seq"):
            entry_delete(entry=entry, actor=_actor(request))
