"""URLs of change events: the SSE stream and its JSON pages."""

from django.urls import URLPattern, path

from memoryapp.api.events import EventsPageView, EventsStreamView

urlpatterns: list[URLPattern] = [
    path("events", EventsStreamView.as_view(), name="events"),
    path("events/page", EventsPageView.as_view(), name="events-page"),
]
