"""`{% staff_overview %}`: the overview of each role at the top of the admin index (governance.console.overview)."""

from __future__ import annotations

from typing import Any

from django import template

from governance.console.overview import overview_for

register = template.Library()


@register.inclusion_tag("admin/overview.html", takes_context=True)
def staff_overview(context: Any) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    return overview_for(user) if user is not None else {"roles": set()}
