"""URLs of this area of the agent API."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
