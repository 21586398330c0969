"""`{% staff_overview %}`: the overview of each role at the top of the admin index (governance.console.overview)."""

from __future__ import annotations

from typing import Any

from django import template

from governance.console.overview import overview_for
from governance.staff.lists import details_text, words

register = template.Library()


@register.inclusion_tag("admin/overview.html", takes_context=True)
def staff_overview(context: Any) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    return overview_for(user) if user is not None else {"roles": set()}


@register.filter(name="words")
def words_filter(key: object) -> str:
    """A key of stored JSON in words on a page: `{{ "branches_deleted"|words }}` -> branches deleted."""
    return words(str(key))


@register.filter(name="in_words")
def in_words(value: object) -> object:
    """Stored JSON on a page: an object as `stale because: 2 · by dedupe`, anything else as it is."""
    return details_text(value) if isinstance(value, dict) else value
