"""URLs of the recall area of the agent API."""

from django.urls import path

from memoryapp.api.search import ContextView, SearchView

urlpatterns = [
    path("search", SearchView.as_view(), name="search"),
    path("threads/<str:thread_id>/context", ContextView.as_view(), name="thread-context"),
]
