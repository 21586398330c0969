"""Admin pages of retention: policies and the prune (operators and privacy officers), legal holds
(privacy officers only).

The prune page runs a dry run in the request (it changes nothing and shows what the real run would
delete: counts per kind and the first hundred threads) and sends the real prune as a job run, whose
page shows its progress and, once done, its counts. Placing and lifting a hold, and saving a
policy, go through the audited services.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from governance.models import JobRun
from governance.retention.holds import holds_lift_counts, legal_hold_lift, legal_hold_place
from governance.retention.policies import POLICY_RULES, retention_policy_delete, retention_policy_save
from governance.retention.services import COUNT_KEYS, PRUNE_JOB_KIND, retention_prune, retention_prune_request
from governance.staff.adminlog import NamelessAdminLog
from governance.staff.confirm import confirm_page, confirmed, staff_actor
from governance.staff.lists import FullWidthList, cell_text, day, presence_filter
from memoryapp.errors import DomainError
from memoryapp.models import Agent, LegalHold, RetentionPolicy

RUN_PRUNE_PERMISSION = "memoryapp.run_prune"
# How each count of a prune report reads on the page.
COUNT_LABELS = {
    "threads_deleted": "threads deleted (last write older than the thread TTL)",
    "threads_busy": "threads skipped: busy (a job run in progress on them)",
    "threads_held": "threads skipped: under a legal hold",
    "thread_entries_deleted": "entries of the deleted threads",
    "checkpoints_deleted": "checkpoints (compactions) dropped beyond the kept ones",
    "history_entries_deleted": "entries dropped wholly before the oldest kept checkpoint",
    "branches_deleted": "abandoned branches deleted",
    "branch_entries_deleted": "entries of the abandoned branches",
    "memory_items_deleted": "memory items deleted in all",
    "suggested_items_expired": "suggested items expired unreviewed",
    "inactive_items_deleted": "superseded, stale and rejected items removed",
    "facts_expired": "facts whose time to live ran out",
    "tool_results_expired": "externalised tool results emptied",
    "job_runs_deleted": "finished job runs deleted",
    "events_deleted": "change events deleted",
    "webhook_deliveries_deleted": "webhook delivery attempts deleted",
}


def count_rows(counts: dict[str, int]) -> list[tuple[str, str, int]]:
    return [(key, COUNT_LABELS.get(key, key), int(counts.get(key, 0))) for key in COUNT_KEYS]


class RetentionPolicyForm(forms.ModelForm):
    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for rule in POLICY_RULES:
            value = data.get(rule)
            # 0 days would take everything at once, 0 checkpoints the summaries the path reads from.
            if isinstance(value, int) and not isinstance(value, bool) and value < 1:
                self.add_error(rule, "At least 1 (leave it blank to keep everything).")
        return data

    class Meta:
        model = RetentionPolicy
        fields = ("agent", *POLICY_RULES)
        help_texts = {
            "agent": "Empty: the default policy, for every agent without one of its own.",
            "thread_ttl_days": "Delete threads whose last write is this many days old (blank: keep them).",
            "keep_checkpoints": "Keep each thread's newest N compactions; older history and branches go.",
            "drop_branches": "Delete the branches rewinds and checkouts left behind.",
            "suggested_review_days": "Suggested items not reviewed within this many days expire.",
            "inactive_item_days": "Remove superseded, stale and rejected items recorded this many days ago.",
            "job_run_days": "Delete finished job runs this many days old.",
            "tool_result_days": "Empty externalised tool results this many days old.",
            "event_days": "Delete change events (and webhook attempts) this many days old.",
        }


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    form = RetentionPolicyForm
    list_display = ("scope", *POLICY_RULES, "updated", "updated_by_shown")
    list_display_links = ("scope",)
    list_select_related = ("agent",)
    readonly_fields = ("updated_at", "updated_by")
    change_list_template = "admin/memoryapp/retentionpolicy/change_list.html"

    @admin.display(description="applies to", ordering="agent__slug")
    def scope(self, obj: RetentionPolicy) -> str:
        return obj.agent.slug if obj.agent_id and obj.agent else "default (every agent without its own)"

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: RetentionPolicy) -> SafeString:
        return day(obj.updated_at)

    @admin.display(description="updated by", ordering="updated_by")
    def updated_by_shown(self, obj: RetentionPolicy) -> SafeString:
        return cell_text(obj.updated_by.removeprefix("staff:"), 16)

    class Media:
        # Nine rules side by side at 1,280 px: their headers wrap (the agent's slug does not).
        css = {"all": ("governance/lists.css",)}

    def save_model(self, request: HttpRequest, obj: RetentionPolicy, form: Any, change: bool) -> None:
        retention_policy_save(policy=obj, actor=staff_actor(request))

    def delete_model(self, request: HttpRequest, obj: RetentionPolicy) -> None:
        retention_policy_delete(policy=obj, actor=staff_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[RetentionPolicy]) -> None:
        for policy in queryset:
            retention_policy_delete(policy=policy, actor=staff_actor(request))

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {**(extra_context or {}), "can_prune": request.user.has_perm(RUN_PRUNE_PERMISSION)}
        return super().changelist_view(request, extra_context=extra)

    def get_urls(self) -> list[URLPattern]:
        prune = path("prune/", self.admin_site.admin_view(self.prune_view), name="memoryapp_retentionpolicy_prune")
        return [prune, *super().get_urls()]

    def prune_view(self, request: HttpRequest) -> HttpResponse:
        """GET: choose an agent (or all); POST `dry` (or an unconfirmed `run`): the dry run's report,
        with the confirmation under it; POST `run` confirmed (`post=yes`, from that report): send the prune."""
        if not request.user.has_perm(RUN_PRUNE_PERMISSION):
            raise PermissionDenied
        agents = list(Agent.objects.order_by("slug").values_list("slug", flat=True))
        slug = (request.POST.get("agent") or request.GET.get("agent") or "").strip()
        agent = Agent.objects.filter(slug=slug).first() if slug else None
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Retention prune",
            "agents": agents,
            "agent": agent.slug if agent else "",
            "report": None,
            "runs": JobRun.objects.filter(kind=PRUNE_JOB_KIND).order_by("-created_at")[:10],
        }
        if slug and agent is None:
            messages.error(request, f"No agent has the slug {slug!r}.")
        elif request.method == "POST" and request.POST.get("action") in ("dry", "run") and not confirmed(request):
            # The prune deletes for good: its dry run first, always, and the run is confirmed from it.
            state = retention_prune(agent=agent, dry_run=True)
            context["report"] = state.report()
            context["rows"] = count_rows(state.counts)
            context["deletes"] = sum(state.counts.values())
            if request.POST.get("action") == "run":
                messages.warning(request, "Nothing was pruned yet: here is what the prune deletes now. Confirm below.")
        elif request.method == "POST" and request.POST.get("action") == "run":
            run = retention_prune_request(agent=agent, actor=staff_actor(request))
            messages.success(
                request, f"The prune was sent as job run {run.pk}; its page shows its progress and counts."
            )
            return HttpResponseRedirect(reverse("admin:memoryapp_retentionpolicy_prune") + f"?run={run.pk}")
        shown = request.GET.get("run", "")
        if shown.isdigit():
            asked = JobRun.objects.filter(kind=PRUNE_JOB_KIND, pk=int(shown)).first()
            if asked is not None:
                context["run"] = asked
                counts = (asked.result or {}).get("counts") or {}
                context["run_rows"] = count_rows(counts) if counts else []
                context["run_thread_ids"] = (asked.result or {}).get("thread_ids") or []
        return TemplateResponse(request, "admin/memoryapp/retentionpolicy/prune.html", context)


class LegalHoldForm(forms.ModelForm):
    class Meta:
        model = LegalHold
        fields = ("agent", "user_id", "thread_external_id", "reason", "ends_at")
        labels = {"user_id": "person (user id)", "thread_external_id": "thread id"}
        help_texts = {
            "agent": "Empty: the person is held in every agent's memory. A thread is held within its agent.",
            "user_id": "Hold everything about this person (or give a thread id instead).",
            "thread_external_id": "Hold this one thread of the agent (the id the agent knows it by).",
            "ends_at": "Optional: the hold ends by itself then (UTC).",
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        user_id = (data.get("user_id") or "").strip()
        thread = (data.get("thread_external_id") or "").strip()
        if bool(user_id) == bool(thread):
            self.add_error("user_id", "Give a person (user id) or a thread id: one of them.")
        if thread and not data.get("agent"):
            self.add_error("agent", "A thread is held within its agent: choose the agent.")
        ends_at = data.get("ends_at")
        if ends_at is not None and ends_at <= timezone.now():
            self.add_error("ends_at", "The end date must be in the future.")
        return data


@admin.register(LegalHold)
class LegalHoldAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    """Privacy officers only (governance/staff/roles.py). A hold is placed, then lifted; never edited or deleted."""

    form = LegalHoldForm
    list_display = (
        "id",
        "target_shown",
        "in_force",
        "placed_by_shown",
        "placed",
        "ends",
        "lifted",
        "lifted_by_shown",
    )
    list_filter = (("lifted_at", presence_filter("in force", empty="in force (not lifted)", present="lifted")),)
    list_select_related = ("agent",)
    search_fields = ("user_id", "thread_external_id", "agent__slug")
    actions = ("lift",)

    class Media:
        css = {"all": ("governance/lists.css",)}

    @admin.display(description="holds")
    def target_shown(self, obj: LegalHold) -> SafeString:
        # A person's id from an identity provider runs to 90 characters: the column wraps it (lists.css).
        return format_html('<span class="cell-wrap">{}</span>', obj.target)

    @admin.display(description="placed by", ordering="placed_by")
    def placed_by_shown(self, obj: LegalHold) -> SafeString:
        return cell_text(obj.placed_by.removeprefix("staff:"), 16)

    @admin.display(description="lifted by", ordering="lifted_by")
    def lifted_by_shown(self, obj: LegalHold) -> SafeString:
        return cell_text(obj.lifted_by.removeprefix("staff:"), 16)

    @admin.display(description="placed", ordering="placed_at")
    def placed(self, obj: LegalHold) -> SafeString:
        return day(obj.placed_at)

    @admin.display(description="ends", ordering="ends_at")
    def ends(self, obj: LegalHold) -> SafeString:
        return day(obj.ends_at)

    @admin.display(description="lifted", ordering="lifted_at")
    def lifted(self, obj: LegalHold) -> SafeString:
        return day(obj.lifted_at)

    @admin.display(description="in force", boolean=True)
    def in_force(self, obj: LegalHold) -> bool:
        now = timezone.now()
        return obj.lifted_at is None and (obj.ends_at is None or obj.ends_at > now)

    def get_readonly_fields(self, request: HttpRequest, obj: LegalHold | None = None) -> Any:
        if obj is None:
            return ()
        return (
            "agent",
            "user_id",
            "thread_external_id",
            "reason",
            "ends_at",
            "placed_by",
            "placed_at",
            "lifted_at",
            "lifted_by",
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the record of what was held stays

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """A placed hold reads only (lifting is the list's action): no save buttons that save nothing."""
        context = {**(extra_context or {}), "show_save": False, "show_save_and_continue": False}
        context["show_save_and_add_another"] = False
        return super().change_view(request, object_id, form_url, extra_context=context)

    def save_model(self, request: HttpRequest, obj: LegalHold, form: Any, change: bool) -> None:
        if change:
            return  # nothing of a placed hold is edited; lifting is the action
        data = form.cleaned_data
        try:
            hold = legal_hold_place(
                agent=data.get("agent"),
                user_id=data.get("user_id") or "",
                thread_external_id=data.get("thread_external_id") or "",
                reason=data.get("reason") or "",
                ends_at=data.get("ends_at"),
                placed_by=staff_actor(request),
            )
        except DomainError as error:  # the form checked the same: a race at most
            raise PermissionDenied(error.message) from error
        obj.pk, obj.placed_at = hold.pk, hold.placed_at
        if hold.erasures_running:
            messages.warning(request, _erasures_running_warning(hold))

    @admin.action(description="Lift the selected holds…", permissions=["change"])
    def lift(self, request: HttpRequest, queryset: QuerySet[LegalHold]) -> HttpResponse | None:
        """First what lifting lets go and a reason to type, then, confirmed with one, lift."""
        holds = list(queryset.select_related("agent").order_by("pk"))
        reason = request.POST.get("reason", "").strip()
        if not confirmed(request) or not reason:
            counts = holds_lift_counts(holds=holds)
            return confirm_page(
                request,
                self,
                title="Lift these legal holds?",
                verb=f"Lift {counts['holds']} hold{'s' if counts['holds'] != 1 else ''}",
                objects=[
                    (
                        f"hold #{h.pk}: {'thread ' + h.thread_external_id if h.thread_external_id else 'person ' + h.user_id}"
                        f" in {h.agent.slug if h.agent else 'every agent'}{' (lifted already)' if h.lifted_at else ''}",
                        reverse("admin:memoryapp_legalhold_change", args=[h.pk]),
                    )
                    for h in holds
                ],
                counted=[
                    ("holds lifted", counts["holds"]),
                    ("threads they keep, which the prune and an erasure may then take", counts["threads"]),
                    ("erasure requests they stopped, which can then be run again", counts["erasures_blocked"]),
                    ("holds lifted already (left as they are)", counts["lifted_already"]),
                ],
                hidden=[("action", "lift"), *((ACTION_CHECKBOX_NAME, str(h.pk)) for h in holds)],
                ask_reason=True,
                reason_label="why the hold ends; recorded as typed in the audit trail",
                reason_error="Say why the hold is lifted." if confirmed(request) else "",
                cancel_url=reverse("admin:memoryapp_legalhold_changelist"),
            )
        try:
            lifted = sum(legal_hold_lift(hold=h, lifted_by=staff_actor(request), reason=reason) for h in holds)
        except DomainError as error:
            messages.error(request, f"Nothing was lifted: {error.message}")
            return None
        messages.success(request, f"{lifted} hold{'s' if lifted != 1 else ''} lifted.")
        return None


def _erasures_running_warning(hold: LegalHold) -> str:
    """What staff are told of a hold placed while an erasure of its person ran (governance.retention.holds):
    where, and that the hold does not stop it."""
    slugs = list(Agent.objects.filter(pk__in=hold.erasures_running).order_by("pk").values_list("slug", flat=True))
    where = ", ".join(slugs)
    return (
        f"Hold #{hold.pk} is placed, but an erasure of this person was already running in agent"
        f"{'s' if len(slugs) > 1 else ''} {where}: it started before the hold, which does not stop it. What it "
        "erases there is gone; the hold keeps what is left if that erasure is interrupted, and blocks any "
        "erasure started from now on."
    )
