"""Knowledge documents in the admin (004 semantic context): operators add, replace and delete the
texts an agent's contexts may cite. Every save goes through the services (chunked, embedded,
audited), never through the form itself."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from governance.staff.adminlog import NamelessAdminLog
from governance.staff.lists import DateRangeFilter, FullWidthList, cell_text, id_cell, moment
from memoryapp.knowledge.services import (
    knowledge_document_add,
    knowledge_document_delete,
    knowledge_document_replace,
)
from memoryapp.models import KnowledgeDocument


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


class KnowledgeDocumentForm(forms.ModelForm):
    content = forms.CharField(widget=forms.Textarea(attrs={"rows": 20, "cols": 100}))
    # Names run to 255 characters: the whole of one in view.
    name = forms.CharField(max_length=255, widget=forms.TextInput(attrs={"size": 100, "class": "vLargeTextField"}))

    class Meta:
        model = KnowledgeDocument
        fields = ["agent", "project_id", "name", "content"]


@admin.register(KnowledgeDocument)
class KnowledgeDocumentAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    form = KnowledgeDocumentForm
    # One line a document (long names cut, whole on hover), newest change first; an agent keeps up
    # to 1,000 of them, so the list pages (100) and counts without a second full count.
    list_display = ("name_shown", "agent", "project", "chunks", "added_by_shown", "updated")
    list_display_links = ("name_shown",)
    list_filter = ("agent", ("updated_at", DateRangeFilter))
    search_fields = ("name", "=project_id")
    search_help_text = "Words of the name, or a project id exactly."
    ordering = ("-updated_at", "pk")
    show_full_result_count = False
    list_select_related = ("agent",)
    raw_id_fields = ("agent",)
    readonly_fields = ("sha256", "chunk_count", "added_by", "created_at", "updated_at")

    class Media:
        css = {"all": ("governance/lists.css",)}

    @admin.display(description="name", ordering="name")
    def name_shown(self, obj: KnowledgeDocument) -> SafeString:
        return cell_text(obj.name, 42)

    @admin.display(description="project", ordering="project_id")
    def project(self, obj: KnowledgeDocument) -> SafeString | str:
        return id_cell(obj.project_id, 20) if obj.project_id else "—"

    @admin.display(description="chunks", ordering="chunk_count")
    def chunks(self, obj: KnowledgeDocument) -> int:
        return obj.chunk_count

    @admin.display(description="added by", ordering="added_by")
    def added_by_shown(self, obj: KnowledgeDocument) -> SafeString:
        return cell_text(obj.added_by.removeprefix("staff:"), 16)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: KnowledgeDocument) -> SafeString:
        return moment(obj.updated_at)

    def get_queryset(self, request: HttpRequest) -> QuerySet[KnowledgeDocument]:
        return super().get_queryset(request).defer("content")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # A document stays with its agent and project: another agent's is added anew.
        return (*self.readonly_fields, "agent", "project_id") if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: KnowledgeDocument, form: Any, change: bool) -> None:
        data = form.cleaned_data
        if change:
            saved = knowledge_document_replace(
                document=obj, content=data["content"], name=data["name"], actor=_actor(request)
            )
        else:
            saved = knowledge_document_add(
                agent=data["agent"],
                name=data["name"],
                content=data["content"],
                project_id=data.get("project_id") or "",
                added_by=request.user.get_username(),
                actor=_actor(request),
            )
        obj.pk, obj.chunk_count = saved.pk, saved.chunk_count

    def delete_model(self, request: HttpRequest, obj: KnowledgeDocument) -> None:
        knowledge_document_delete(document=obj, actor=_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[KnowledgeDocument]) -> None:
        for document in queryset.order_by("pk"):
            knowledge_document_delete(document=document, actor=_actor(request))
