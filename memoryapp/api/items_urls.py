"""URLs of memory items, facts and the model's memory tools under /api/v1/ (no trailing slash)."""

from django.urls import URLPattern, path

from memoryapp.api import items as views

urlpatterns: list[URLPattern] = [
    path("items", views.ItemsView.as_view(), name="items"),
    path("items/<str:item_id>", views.ItemView.as_view(), name="item"),
    path("items/<str:item_id>/history", views.ItemHistoryView.as_view(), name="item-history"),
    path("items/<str:item_id>/forget", views.ItemForgetView.as_view(), name="item-forget"),
    # A namespace holds slashes: the view splits the path (see FactsView).
    path("facts/<path:path>", views.FactsView.as_view(), name="facts"),
    path("memory-tools", views.MemoryToolsView.as_view(), name="memory-tools"),
]
