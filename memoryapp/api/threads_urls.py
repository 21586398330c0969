"""URLs of threads and entries under /api/v1/ (no trailing slash)."""

from django.urls import URLPattern, path

from memoryapp.api import runs
from memoryapp.api import threads as views

urlpatterns: list[URLPattern] = [
    path("threads", views.ThreadsView.as_view(), name="threads"),
    # Before `threads/<id>` so that a thread named "import" is still reachable by GET.
    path("threads/import", views.ThreadImportView.as_view(), name="thread-import"),
    path("threads/<str:thread_id>", views.ThreadView.as_view(), name="thread"),
    path("threads/<str:thread_id>/entries", views.ThreadEntriesView.as_view(), name="thread-entries"),
    path("threads/<str:thread_id>/path", views.ThreadPathView.as_view(), name="thread-path"),
    path("threads/<str:thread_id>/rewind", views.ThreadRewindView.as_view(), name="thread-rewind"),
    path("threads/<str:thread_id>/checkout", views.ThreadCheckoutView.as_view(), name="thread-checkout"),
    path("threads/<str:thread_id>/fork", views.ThreadForkView.as_view(), name="thread-fork"),
    path("threads/<str:thread_id>/runs", runs.ThreadRunsView.as_view(), name="thread-runs"),
    path("threads/<str:thread_id>/runs/<str:run_id>", runs.ThreadRunView.as_view(), name="thread-run"),
    path(
        "threads/<str:thread_id>/runs/<str:run_id>/finish", runs.ThreadRunFinishView.as_view(), name="thread-run-finish"
    ),
    path("threads/<str:thread_id>/export", views.ThreadExportView.as_view(), name="thread-export"),
    path("entries/<str:entry_id>", views.EntryView.as_view(), name="entry"),
    path("entries/<str:entry_id>/redact", views.EntryRedactView.as_view(), name="entry-redact"),
]
