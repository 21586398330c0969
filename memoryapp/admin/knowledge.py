"""Knowledge documents in the admin (004 semantic context): operators add, replace and delete the
texts an agent's contexts may cite. Every save goes through the services (chunked, embedded,
audited), never through the form itself."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from governance.staff.adminlog import NamelessAdminLog
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

    class Meta:
        model = KnowledgeDocument
        fields = ["agent", "project_id", "name", "content"]


@admin.register(KnowledgeDocument)
class KnowledgeDocumentAdmin(NamelessAdminLog, admin.ModelAdmin):
    form = KnowledgeDocumentForm
    list_display = ("name", "agent", "project_id", "chunk_count", "added_by", "updated_at")
    list_filter = ("agent",)
    search_fields = ("name", "project_id")
    list_select_related = ("agent",)
    raw_id_fields = ("agent",)
    readonly_fields = ("sha256", "chunk_count", "added_by", "created_at", "updated_at")

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
