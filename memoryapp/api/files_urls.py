"""URLs of memory files: the memory tool, lists, history, versions and the working note."""

from django.urls import URLPattern, path

from memoryapp.api.files import (
    MemoryFileHistoryView,
    MemoryFilesListView,
    MemoryFileVersionView,
    MemoryToolView,
    WorkingNoteView,
)

urlpatterns: list[URLPattern] = [
    path("memory-tool", MemoryToolView.as_view(), name="memory-tool"),
    path("memory-files", MemoryFilesListView.as_view(), name="memory-files"),
    path("memory-files/history", MemoryFileHistoryView.as_view(), name="memory-file-history"),
    path("memory-files/versions/<str:version_id>", MemoryFileVersionView.as_view(), name="memory-file-version"),
    path("working-note", WorkingNoteView.as_view(), name="working-note"),
]
