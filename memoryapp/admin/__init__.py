"""The admin of the memory domain, one module per area (Django's autodiscovery imports this package)."""

from django.contrib import admin

from memoryapp.admin import agents, consolidation, events, files, items, knowledge, screening, sessions, threads  # noqa: F401
from memoryapp.admin.login_guard import LockoutAuthenticationForm

# The login page says when a sign-in is locked out after repeated failures, and for how long.
admin.site.login_form = LockoutAuthenticationForm
