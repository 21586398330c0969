"""A secret the admin makes (an agent's API key, a webhook's signing secret) is shown once, on the
page of the very response that made it.

Never in Django's `messages`: its default storage keeps messages in a cookie (signed, not
encrypted), so the secret would travel back and forth in a header, land in proxies' and browsers'
stores, and be readable by anything that sees the cookie. Nothing keeps it on the server either:
the page is rendered from the request that made the secret and marked never to be cached; once
left, the secret cannot be shown again (a lost key is revoked and a new one made).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.admin import AdminSite
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers

# Where the secrets of one request wait for its response (the request object: gone with it).
_HELD = "_secrets_shown_once"
TEMPLATE = "admin/memoryapp/shown_once.html"


@dataclass(frozen=True)
class ShownOnce:
    """One secret to show: what it is (`label`, e.g. "New key for alice") and what to do with it."""

    label: str
    value: str
    note: str


def secret_show_once(request: HttpRequest, *, label: str, value: str, note: str) -> None:
    """Hold a secret for the page of this request's response (`secrets_page`)."""
    held: list[ShownOnce] = getattr(request, _HELD, [])
    held.append(ShownOnce(label=label, value=value, note=note))
    setattr(request, _HELD, held)


def secrets_page(
    request: HttpRequest, *, admin_site: AdminSite, title: str, next_url: str, said: str = ""
) -> TemplateResponse | None:
    """The page showing the secrets this request made (None when it made none), never cached;
    `said` is what was done (the message a redirect would have carried), `next_url` where to go on."""
    held: list[ShownOnce] = getattr(request, _HELD, [])
    if not held:
        return None
    response = TemplateResponse(
        request,
        TEMPLATE,
        {**admin_site.each_context(request), "title": title, "secrets": held, "next_url": next_url, "said": said},
    )
    add_never_cache_headers(response)
    return response
