"""Links from a thread's or an item's page to the governance pages about its person."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse


def export_person_url(request: HttpRequest, *, user_id: str, agent_id: int | None) -> str:
    """The export request form filled in with this person and agent (every agent: None), for staff
    who may file one ("" otherwise)."""
    if not user_id or not request.user.has_perm("governance.add_exportrequest"):
        return ""
    try:
        form = reverse("admin:governance_exportrequest_add")
    except NoReverseMatch:
        return ""
    query: dict[str, str | int] = {"user_id": user_id}
    if agent_id is not None:
        query["agents"] = agent_id
    return f"{form}?{urlencode(query)}"
