"""URLs of compaction, extraction and cleared tool results under /api/v1/ (no trailing slash)."""

from django.urls import URLPattern, path

from memoryapp.api import compaction as views

urlpatterns: list[URLPattern] = [
    path("threads/<str:thread_id>/compact", views.ThreadCompactView.as_view(), name="thread-compact"),
    path("threads/<str:thread_id>/extract", views.ThreadExtractView.as_view(), name="thread-extract"),
    path("tool-results/<str:handle>", views.ToolResultView.as_view(), name="tool-result"),
    path("settings/compaction", views.AgentAutoCompactionView.as_view(), name="compaction-settings"),
    path(
        "threads/<str:thread_id>/settings/compaction",
        views.ThreadAutoCompactionView.as_view(),
        name="thread-compaction-settings",
    ),
]
