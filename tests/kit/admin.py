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


def secrets_in_cookies(response: Any, secret: str) -> list[str]:
    """The cookies a response sets that carry `secret`: as it is, or inside Django's `messages`
    cookie once decoded (which may compress its value, so a plain look would miss it)."""
    from django.contrib.messages.storage.cookie import CookieStorage
    from django.http import HttpRequest

    found = []
    for name, morsel in response.cookies.items():
        if secret in morsel.value:
            found.append(name)
        elif name == CookieStorage.cookie_name and morsel.value:
            decoded = CookieStorage(HttpRequest())._decode(morsel.value) or []
            if any(secret in str(message) for message in decoded):
                found.append(name)
    return found
