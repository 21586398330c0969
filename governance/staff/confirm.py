"""The page every irreversible action of the admin shows first: what goes with it, counted by kind.

It replaces Django's stock delete confirmation (which lists the rows Django would delete, not what
the services take: items, quotes, file versions, summaries, fork copies). The counts come from a
dry run of the very services the action calls (`governance.staff.consequences`), so what the
page shows is what confirming does; the message after confirming repeats the counts of the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse

from governance.staff.consequences import Consequences, Step, consequences_apply, consequences_preview
from memoryapp.errors import DomainError
from memoryapp.models import Thread

# A confirmation lists at most this many of the objects acted on by name.
NAMED = 30
REASON_MAX = 500


def staff_actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


def confirmed(request: HttpRequest) -> bool:
    return request.method == "POST" and request.POST.get("post") == "yes"


def _fork_links(report: Consequences) -> list[tuple[str, str]]:
    """(external id, URL) of the forks touched: one query for all of them."""
    wanted = {(agent_id, name) for agent_id, name in report.forks if agent_id is not None}
    if not wanted:
        return []
    rows = Thread.objects.filter(
        agent_id__in={a for a, _ in wanted}, external_id__in={n for _, n in wanted}
    ).values_list("pk", "agent_id", "external_id")
    return sorted(
        (name, reverse("admin:memoryapp_thread_change", args=[pk]))
        for pk, agent, name in rows
        if (agent, name) in wanted
    )


def _item_links(report: Consequences) -> list[tuple[str, str]]:
    links = []
    for item_id in report.purged_item_ids[:NAMED]:
        try:
            links.append((item_id, reverse("admin:memoryapp_memoryitem_change", args=[quote(item_id)])))
        except NoReverseMatch:
            links.append((item_id, ""))
    return links


def confirm_page(
    request: HttpRequest,
    model_admin: admin.ModelAdmin,
    *,
    title: str,
    verb: str,
    objects: Sequence[tuple[str, str]],
    steps: Sequence[Step] = (),
    counted: Sequence[tuple[str, int]] | None = None,
    hidden: Sequence[tuple[str, str]] = (),
    ask_reason: bool = False,
    reason_label: str = "kept on the entry, not in the audit trail",
    reason_error: str = "",
    warning: str = "",
    action_url: str = "",
    cancel_url: str,
) -> TemplateResponse:
    """Dry-run the steps and show what they take, with a form that posts `post=yes` to confirm.

    `objects` are (label, URL) of what the action is about; `hidden` the fields that bring the
    confirmation back to the same action (an admin action's name and selection). An action that
    takes no cascade (a key revoked, a hold lifted) gives what it changes as `counted` (label,
    count), counted by its own selectors, instead of `steps`. `warning`: said above the counts.
    """
    if counted is not None:
        report = Consequences()
        rows = list(counted)
    else:
        try:
            report = consequences_preview(steps=steps, actor=staff_actor(request))
        except DomainError as exc:  # other writers held the rows every try: nothing to show yet
            report = Consequences(skipped=[("(all)", exc.message)])
        rows = report.rows()
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": title,
        "verb": verb,
        "objects": list(objects)[:NAMED],
        "more_objects": max(0, len(objects) - NAMED),
        "report": report,
        "rows": rows,
        "counted": counted is not None,
        "warning": warning,
        "action_url": action_url,
        "reason_label": reason_label,
        "fork_links": _fork_links(report),
        "item_links": _item_links(report),
        "more_items": max(0, len(report.purged_item_ids) - NAMED),
        "hidden": list(hidden),
        "ask_reason": ask_reason,
        "reason": request.POST.get("reason", "") if request.method == "POST" else "",
        "reason_error": reason_error,
        "reason_max": REASON_MAX,
        "cancel_url": cancel_url,
    }
    return TemplateResponse(request, "admin/memoryapp/confirm.html", context)


def apply_and_report(request: HttpRequest, *, steps: Sequence[Step], done: str) -> Consequences | None:
    """Run the steps for real and say what they took (the same counts as their preview); None,
    with the reason said, when they could not run (other writers held the rows every try)."""
    try:
        report = consequences_apply(steps=steps, actor=staff_actor(request))
    except DomainError as exc:
        messages.error(request, f"Nothing was changed: {exc.message}")
        return None
    message = f"{done}: {report.summary()}."
    if report.skipped:
        message += f" Skipped {len(report.skipped)}: " + "; ".join(f"{i} ({why})" for i, why in report.skipped[:10])
    messages.success(request, message) if not report.skipped else messages.warning(request, message)
    return report
