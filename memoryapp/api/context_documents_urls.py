"""URLs of standing instructions: context documents and a thread's memory switch."""

from django.urls import URLPattern, path

from memoryapp.api.context_documents import ContextDocumentsView, ContextDocumentView, ThreadMemoryView

urlpatterns: list[URLPattern] = [
    path("context-documents", ContextDocumentsView.as_view(), name="context-documents"),
    path("context-documents/<str:name>", ContextDocumentView.as_view(), name="context-document"),
    path("threads/<str:thread_id>/memory", ThreadMemoryView.as_view(), name="thread-memory"),
]
