"""The admin as staff open it: a logged-in Django test client."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tests.kit.factories import StaffFactory


def staff_client(**staff: Any) -> Client:
    """A client logged in as a new staff user (StaffFactory's arguments: username, groups, permissions...)."""
    client = Client()
    client.force_login(StaffFactory(**staff))
    return client
