"""The agent API under /api/v1/: one URL module per area."""

from django.urls import include, path

from memoryapp.api.views_root import ApiRootView

urlpatterns = [
    path("", ApiRootView.as_view(), name="api-root"),
    path("", include("memoryapp.api.threads_urls")),
    path("", include("memoryapp.api.search_urls")),
    path("", include("memoryapp.api.items_urls")),
    path("", include("memoryapp.api.files_urls")),
    path("", include("memoryapp.api.compaction_urls")),
    path("", include("memoryapp.api.events_urls")),
    path("", include("memoryapp.api.context_documents_urls")),
    path("", include("memoryapp.api.users_urls")),
]
