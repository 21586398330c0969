"""`{% forbidden_reason %}`: why the admin refused a page (templates/403.html), in the roles' words.

A 403 without a reason leaves a person guessing whether the page is broken. From the URL refused this
finds the model the page is about and says which permission opens it and which roles
(governance.staff.roles) hold it, and which roles the person has; a refusal that carried its own message
(PermissionDenied("...")) says that too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import template
from django.apps import apps
from django.contrib.auth.models import Permission

from governance.staff.roles import ROLES

register = template.Library()

# What a page of the admin does, from the last part of its URL name (the rest asks to view).
_ACTIONS = {"add": "add", "change": "view", "delete": "delete", "changelist": "view", "history": "view"}


@dataclass(frozen=True)
class Refusal:
    needed: str  # the permission's name as the admin shows it ("Can view thread")
    codename: str  # "memoryapp.view_thread"
    roles: list[str]  # the roles that hold it
    yours: list[str]  # the roles the person has
    message: str  # what the refusing code said, if anything


def _model_of(url_name: str) -> tuple[Any, str] | None:
    """`memoryapp_thread_changelist` -> (Thread, "view"); None for a URL that names no model."""
    for model in apps.get_models():
        prefix = f"{model._meta.app_label}_{model._meta.model_name}_"
        if url_name.startswith(prefix):
            rest = url_name[len(prefix) :]
            return model, _ACTIONS.get(rest, "change" if rest not in ("tree", "review") else "view")
    return None


@register.simple_tag(takes_context=True)
def forbidden_reason(context: Any) -> Refusal | None:
    request = context.get("request")
    exception = str(context.get("exception") or "")
    user = getattr(request, "user", None)
    match = getattr(request, "resolver_match", None)
    yours = sorted(user.groups.values_list("name", flat=True)) if user is not None and user.is_authenticated else []
    found = _model_of(match.url_name or "") if match is not None and match.namespace == "admin" else None
    if found is None:
        return Refusal(needed="", codename="", roles=[], yours=yours, message=exception)
    model, action = found
    opts = model._meta
    codename = f"{opts.app_label}.{action}_{opts.model_name}"
    if user is not None and user.has_perm(codename):
        # They may open the page: what was refused is an action on it, which needs more than that.
        wanted = [code for code in (f"{opts.app_label}.change_{opts.model_name}",) if not user.has_perm(code)]
        codename = wanted[0] if wanted else codename
    app_label, code = codename.split(".", 1)
    permission = Permission.objects.filter(content_type__app_label=app_label, codename=code).first()
    roles = [role for role, codes in ROLES.items() if codename in codes]
    return Refusal(
        needed=permission.name if permission is not None else codename,
        codename=codename,
        roles=roles,
        yours=yours,
        message=exception,
    )
