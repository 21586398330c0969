"""URLs about the person memory is about, under /api/v1/ (no trailing slash)."""

from django.urls import URLPattern, path

from memoryapp.api import screening
from memoryapp.api import users as views

urlpatterns: list[URLPattern] = [
    path("users/<str:user_id>/forget", views.UserForgetView.as_view(), name="user-forget"),
    path("users/<str:user_id>/identifiers", screening.UserIdentifiersView.as_view(), name="user-identifiers"),
    path("settings/screening", screening.ScreeningSettingsView.as_view(), name="screening-settings"),
]
