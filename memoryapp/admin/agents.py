from __future__ import annotations

from collections import Counter
from typing import Any

from django import forms
from django.apps import apps
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from governance.staff.adminlog import NamelessAdminLog
from governance.staff.confirm import confirm_page, confirmed
from governance.staff.lists import FullWidthList, cell_text, day, presence_filter
from memoryapp.admin.items import REVIEW_PERMISSION
from memoryapp.admin.shown_once import secret_show_once, secrets_page
from memoryapp.agents.selectors import agent_delete_counts
from memoryapp.agents.services import (
    AGENT_LIMIT_FIELDS,
    TRUST_PERMISSION,
    agent_delete,
    agent_key_create,
    agent_key_revoke,
    agent_key_trust_set,
    agent_limits_set,
    agent_shadow_mode_set,
    holds_naming_agent,
)
from memoryapp.compaction.auto import (
    SETTING_NAMES,
    agent_compaction_settings_set,
    auto_compaction_combination_check,
    auto_compaction_resolve,
    auto_compaction_values,
)
from memoryapp.consolidation.fold import playbook_shadow_mode_set
from memoryapp.errors import DomainError
from memoryapp.models import Agent, AgentKey, CompactionSettings, LegalHold, MemoryItem, Thread
from memoryapp.models.choices import ItemStatus
from memoryapp.prompts import SUMMARY_TEMPLATES


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


def _may_set_trust(request: HttpRequest) -> bool:
    return bool(request.user.has_perm(TRUST_PERMISSION))


def _show_key_once(request: HttpRequest, agent: Agent, raw: str) -> None:
    """On the page of this response only, never in a cookie (memoryapp.admin.shown_once)."""
    secret_show_once(
        request,
        label=f"New key for {agent.slug}",
        value=raw,
        note="The agent sends it as Authorization: Bearer <key>.",
    )


def _hold_named(hold: LegalHold) -> SafeString:
    """A hold as the delete confirmation names it: its link, what it holds, whether it is in force."""
    state = "lifted" if hold.lifted_at else "in force"
    try:
        url = reverse("admin:memoryapp_legalhold_change", args=[hold.pk])
    except NoReverseMatch:
        return format_html("legal hold #{} on {} ({})", hold.pk, hold.target, state)
    return format_html('<a href="{}">legal hold #{}</a> on {} ({})', url, hold.pk, hold.target, state)


def _deleted_tell(request: HttpRequest, agent: Agent, counts: dict[str, int]) -> None:
    """What went with the agent, by kind in Django's words: "2 threads, 3 entries"."""
    said = []
    for label, n in counts.items():
        meta = apps.get_model(label)._meta
        if meta.model is not Agent:
            said.append(f"{n} {meta.verbose_name if n == 1 else meta.verbose_name_plural}")
    messages.info(request, f"Agent {agent.slug} deleted" + (f" with {', '.join(said)}." if said else "."))


class AgentKeyInline(admin.TabularInline):
    model = AgentKey
    extra = 0
    can_delete = False
    fields = ("prefix", "name", "max_trust", "created_at", "last_used_at", "revoked_at")
    # A key's trust changes on the key's own page, through the audited service, for those who may.
    readonly_fields = fields
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CompactionSettingsForm(forms.ModelForm):
    """Checked by the same rules as the API (memoryapp.compaction.auto), each error on its field."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The named summary prompts (a field, not a form's own `template_name` attribute).
        self.fields["template_name"] = forms.ChoiceField(
            choices=[("", "default"), *((name, name) for name in SUMMARY_TEMPLATES if name != "default")],
            required=False,
            help_text="The named summary prompt (summaries only; not for hierarchical).",
        )

    class Meta:
        model = CompactionSettings
        fields = ("agent", *SETTING_NAMES)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        try:
            values = auto_compaction_values({name: cleaned[name] for name in SETTING_NAMES if name in cleaned})
            auto_compaction_combination_check(auto_compaction_resolve(values, None), field="template_name")
        except DomainError as error:
            self.add_error(error.field if error.field in self.fields else None, error.message)
        return cleaned


def _link(name: str, label: str, query: str = "") -> str | None:
    try:
        return format_html('<a href="{}{}">{}</a>', reverse(f"admin:{name}"), query, label)
    except NoReverseMatch:
        return None


def _compaction_link(agent: Agent) -> str | None:
    row = CompactionSettings.objects.filter(agent=agent).first()
    if row is None:
        return _link("memoryapp_compactionsettings_add", "automatic compaction (off)", f"?agent={agent.pk}")
    try:
        url = reverse("admin:memoryapp_compactionsettings_change", args=[agent.pk])
    except NoReverseMatch:
        return None
    state = "on" if row.enabled else "off"
    return format_html('<a href="{}">automatic compaction ({})</a>', url, state)


@admin.register(CompactionSettings)
class CompactionSettingsAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    """An agent's automatic compaction, for operators: saved through `agent_compaction_settings_set`
    (checked as the API checks it, audited), never by the form itself."""

    form = CompactionSettingsForm
    list_display = (
        "agent_shown",
        "enabled",
        "context_window",
        "trigger_shown",
        "strategy",
        "keep_recent",
        "model_shown",
        "template_name",
        "pre_step",
        "updated",
    )
    list_filter = ("enabled", "strategy", "pre_step")
    list_select_related = ("agent",)
    search_fields = ("agent__slug",)
    raw_id_fields = ("agent",)

    fields = ("agent", *SETTING_NAMES, "updated_at")

    class Media:
        css = {"all": ("governance/lists.css",)}

    @admin.display(description="trigger ratio", ordering="trigger_ratio")
    def trigger_shown(self, obj: CompactionSettings) -> str:
        """The token trigger and the entry count in one column (the list fits 1,280 px)."""
        if obj.message_threshold:
            return f"{obj.trigger_ratio:g} or {obj.message_threshold:,} entries"
        return f"{obj.trigger_ratio:g}"

    @admin.display(description="summarizer model", ordering="summarizer_model")
    def model_shown(self, obj: CompactionSettings) -> SafeString:
        return cell_text(obj.summarizer_model, 20)  # a deployment's name runs long

    @admin.display(description="agent", ordering="agent__slug")
    def agent_shown(self, obj: CompactionSettings) -> SafeString:
        return cell_text(obj.agent.slug, 20)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: CompactionSettings) -> SafeString:
        return day(obj.updated_at)

    def get_readonly_fields(self, request: HttpRequest, obj: CompactionSettings | None = None) -> list[str]:
        return ["agent", "updated_at"] if obj is not None else ["updated_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[CompactionSettings]:
        return super().get_queryset(request).select_related("agent")  # its name is the agent's slug

    def has_delete_permission(self, request: HttpRequest, obj: CompactionSettings | None = None) -> bool:
        return False  # turned off with `enabled`, so the change is audited like any other

    def save_model(self, request: HttpRequest, obj: CompactionSettings, form: Any, change: bool) -> None:
        names = [name for name in SETTING_NAMES if name in form.changed_data or not change]
        agent_compaction_settings_set(
            agent=obj.agent, values={name: form.cleaned_data[name] for name in names}, actor=_actor(request)
        )


class AgentForm(forms.ModelForm):
    """The agent's page. Its busy policy may be left out of a post (a script that sets the name
    only): the stored values stand, rather than the post failing on a field it never meant."""

    class Meta:
        model = Agent
        # The admin's own field list (get_fields, the read-only ones left out) replaces this one.
        fields = ["slug", "name", "active", "shadow_mode", "playbook_shadow_mode", *AGENT_LIMIT_FIELDS]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("on_busy", "busy_timeout_seconds"):
            if name in self.fields:
                self.fields[name].required = False

    def clean_on_busy(self) -> str:
        return str(self.cleaned_data.get("on_busy") or self.instance.on_busy)

    def clean_busy_timeout_seconds(self) -> int:
        value = self.cleaned_data.get("busy_timeout_seconds")
        return int(value if value is not None else self.instance.busy_timeout_seconds)


@admin.register(Agent)
class AgentAdmin(NamelessAdminLog, admin.ModelAdmin):
    form = AgentForm
    list_display = ("slug", "name", "active", "shadow_mode", "playbook_shadow_mode", "created_at")
    list_filter = ("active", "shadow_mode", "playbook_shadow_mode")
    search_fields = ("slug", "name")
    inlines = [AgentKeyInline]
    actions = ["create_key"]
    # The purposes are the agent's to set (PATCH /api/v1/settings/purposes, audited): shown here.
    readonly_fields = ("memory_links", "purposes_shown")
    delete_confirmation_template = "admin/memoryapp/agent/delete_confirmation.html"

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> list[str]:
        # Shadow mode off lets extracted items skip review: only TRUST_PERMISSION changes it
        # (a new agent starts in shadow mode).
        # Playbook shadow mode off lets folded lessons reach the playbook every run reads unreviewed.
        fields = list(super().get_readonly_fields(request, obj))
        return fields if _may_set_trust(request) else [*fields, "shadow_mode", "playbook_shadow_mode"]

    def get_exclude(self, request: HttpRequest, obj: Agent | None = None) -> Any:
        # A new agent starts with the defaults of its busy policy and limits; they are set on its
        # page afterwards (where a change is audited with the old value).
        excluded = list(super().get_exclude(request, obj) or [])
        excluded.append("purposes")
        return [*excluded, *AGENT_LIMIT_FIELDS] if obj is None else excluded

    @admin.display(description="purposes")
    def purposes_shown(self, obj: Agent) -> str:
        """What the agent collects memory for (items and facts carry these; recall may be bound to one)."""
        return ", ".join(obj.purposes or []) or "none: memory is not purpose-bound"

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        # The page's links are drawn without the request: the viewer rides on the agent they are about.
        agent = super().get_object(request, object_id, from_field)
        if agent is not None:
            agent.viewer = request.user
        return agent

    @admin.display(description="its memory")
    def memory_links(self, obj: Agent) -> SafeString:
        """Where the agent's threads, items, files, review queue, jobs and audit records are (each
        list filtered to this agent), with the two counts a person looks for first: only the lists
        the viewer's role may open (an operator reads no conversation: no link to a 403)."""
        if obj.pk is None:
            return mark_safe("—")
        viewer = getattr(obj, "viewer", None)

        def may(permission: str) -> bool:
            return viewer is None or bool(viewer.has_perm(permission))

        by_agent = f"?agent__id__exact={obj.pk}"
        links = []
        if may("memoryapp.view_thread"):
            threads = Thread.objects.filter(agent=obj).count()
            links.append(_link("memoryapp_thread_changelist", f"threads ({threads})", by_agent))
        if may("memoryapp.view_entry"):
            links.append(_link("memoryapp_entry_changelist", "entries", by_agent))
        if may("memoryapp.view_memoryitem"):
            links.append(_link("memoryapp_memoryitem_changelist", "memory items", by_agent))
        if may(REVIEW_PERMISSION):
            waiting = MemoryItem.objects.filter(agent=obj, status=ItemStatus.SUGGESTED, expired_at__isnull=True).count()
            links.append(_link("memoryapp_memoryitem_review", f"review queue ({waiting} waiting)", f"?agent={obj.pk}"))
        if may("memoryapp.view_memoryfileversion"):
            links.append(_link("memoryapp_memoryfileversion_tree", "memory files", f"?agent={obj.slug}"))
        if may("governance.view_jobrun"):
            links.append(_link("governance_jobrun_changelist", "job runs", f"?agent_id={obj.pk}"))
        if may("governance.view_auditrecord"):
            links.append(_link("governance_auditrecord_changelist", "audit records", f"?agent_id={obj.pk}"))
        if may("memoryapp.view_compactionsettings"):
            links.append(_compaction_link(obj))
        return format_html_join(" · ", "{}", ((link,) for link in links if link)) or mark_safe("—")

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        wanted = {name: getattr(obj, name) for name in ("shadow_mode", "playbook_shadow_mode")}
        changed = [name for name in wanted if name in form.changed_data]
        if changed and not _may_set_trust(request):
            raise PermissionDenied
        for name in changed:
            # Written by the services below (audited), not by the form.
            field = Agent._meta.get_field(name)
            assert isinstance(field, models.Field)
            setattr(
                obj, name, Agent.objects.values_list(name, flat=True).get(pk=obj.pk) if change else field.get_default()
            )
        limits = {name: getattr(obj, name) for name in AGENT_LIMIT_FIELDS if name in form.changed_data}
        if change and limits:
            # Written by `agent_limits_set` below (audited, with the old values), not by the form.
            for name, value in Agent.objects.values(*limits).get(pk=obj.pk).items():
                setattr(obj, name, value)
        super().save_model(request, obj, form, change)
        if change and limits:
            agent_limits_set(agent=obj, values=limits, actor=_actor(request))
        if "shadow_mode" in changed:
            agent_shadow_mode_set(agent=obj, shadow_mode=wanted["shadow_mode"], actor=_actor(request))
        if "playbook_shadow_mode" in changed:
            playbook_shadow_mode_set(agent=obj, on=wanted["playbook_shadow_mode"], actor=_actor(request))
        if change:
            return
        if not self.has_mint_permission(request):
            messages.warning(
                request, f"{obj.slug} was created without a key: making keys needs the 'add agent key' permission."
            )
            return
        _, raw = agent_key_create(agent=obj, name="admin", actor=_actor(request))
        _show_key_once(request, obj, raw)

    # --- deletion: through `agent_delete` (audited, counted), never past a legal hold ---

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, ...]:
        """What deleting the agents takes with them, counted by kind (`agent_delete_counts`), or the
        legal holds that keep them (as what protects them).

        Not Django's nested list of every object: it reads each row whole (opening sealed values) to
        link it, and asks for the delete permission of each kind on the way, which the admins of
        items, file versions and compaction settings refuse (they are never deleted piecemeal), so
        no agent that ever held one could be deleted. The agent goes whole, through `agent_delete`
        (audited), by whoever may delete agents."""
        agents = list(objs)
        holds = [hold for agent in agents for hold in holds_naming_agent(agent=agent)]
        if holds:
            return [], {}, set(), [_hold_named(hold) for hold in holds]
        counts: Counter[type[models.Model]] = Counter()
        for agent in agents:
            counts.update(agent_delete_counts(agent=agent))
        by_kind = {model._meta.verbose_name_plural: n for model, n in counts.items()}
        return [str(agent) for agent in agents], by_kind, set(), []

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None) -> Any:
        agent = self.get_object(request, object_id)
        holds = [_hold_named(hold) for hold in holds_naming_agent(agent=agent)] if agent is not None else []
        return super().delete_view(request, object_id, extra_context={**(extra_context or {}), "holds": holds})

    def delete_model(self, request: HttpRequest, obj: Agent) -> None:
        try:
            counts = agent_delete(agent=obj, actor=_actor(request))
        except DomainError as error:  # a hold placed since the confirmation
            raise PermissionDenied(error.message) from error
        _deleted_tell(request, obj, counts)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        for agent in queryset.order_by("pk"):
            self.delete_model(request, agent)

    def log_deletion(self, request: HttpRequest, obj: Any, object_repr: str) -> Any:
        return None  # the audit trail records it (agent.deleted), with the counts

    def log_deletions(self, request: HttpRequest, queryset: Any) -> Any:
        return None

    def has_mint_permission(self, request: HttpRequest) -> bool:
        # A key is a credential: minting one needs the add permission of keys, not a view of agents.
        return bool(request.user.has_perm("memoryapp.add_agentkey"))

    @admin.action(description="Create a new API key (shown once)", permissions=["mint"])
    def create_key(self, request: HttpRequest, queryset: QuerySet[Agent]) -> TemplateResponse | None:
        for agent in queryset.order_by("slug"):
            _, raw = agent_key_create(agent=agent, name="admin", actor=_actor(request))
            _show_key_once(request, agent, raw)
        return secrets_page(
            request,
            admin_site=self.admin_site,
            title="New API keys",
            next_url=reverse("admin:memoryapp_agent_changelist"),
        )

    def response_add(self, request: HttpRequest, obj: Agent, post_url_continue: str | None = None) -> HttpResponse:
        # The key made with the agent is shown on this response's page, not carried to the next one.
        page = secrets_page(
            request,
            admin_site=self.admin_site,
            title="New agent",
            next_url=reverse("admin:memoryapp_agent_change", args=[obj.pk]),
            said=f"The agent {obj.slug} was added.",
        )
        return page if page is not None else super().response_add(request, obj, post_url_continue)


@admin.register(AgentKey)
class AgentKeyAdmin(NamelessAdminLog, admin.ModelAdmin):
    list_display = ("prefix", "agent", "name", "max_trust", "created_at", "last_used_at", "state")
    list_filter = ("max_trust", ("revoked_at", presence_filter("in use", empty="in use", present="revoked")))
    list_select_related = ("agent",)
    search_fields = ("prefix", "agent__slug", "name")
    readonly_fields = ("agent", "prefix", "key_hash", "created_at", "last_used_at", "revoked_at")
    fields = ("agent", "name", "prefix", "max_trust", "created_at", "last_used_at", "revoked_at", "key_hash")
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # keys are made from the agent's page, where the raw key is shown once

    def get_readonly_fields(self, request: HttpRequest, obj: AgentKey | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        return fields if _may_set_trust(request) else [*fields, "max_trust"]

    def save_model(self, request: HttpRequest, obj: AgentKey, form: Any, change: bool) -> None:
        """The name is saved by the form; a new max trust only through `agent_key_trust_set` (audited)."""
        trust_changed = "max_trust" in form.changed_data
        if trust_changed and not _may_set_trust(request):
            raise PermissionDenied
        wanted = obj.max_trust
        if trust_changed:
            obj.max_trust = AgentKey.objects.values_list("max_trust", flat=True).get(pk=obj.pk)
        super().save_model(request, obj, form, change)
        if trust_changed:
            agent_key_trust_set(key=obj, max_trust=wanted, actor=_actor(request))

    @admin.display(description="state")
    def state(self, obj: AgentKey) -> str:
        return "revoked" if obj.revoked_at else "active"

    @admin.action(description="Revoke the selected keys…", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentKey]) -> HttpResponse | None:
        """First what revoking stops (the agents left with no key), then, confirmed, revoke."""
        keys = list(queryset.select_related("agent").order_by("agent__slug", "prefix"))
        live = [k for k in keys if k.revoked_at is None]
        if not confirmed(request):
            # The agents keeping an active key not chosen: one query, not one per key.
            kept = set(
                AgentKey.objects.filter(agent_id__in={k.agent_id for k in live}, revoked_at__isnull=True)
                .exclude(pk__in={k.pk for k in live})
                .values_list("agent_id", flat=True)
            )
            stranded = {k.agent.slug for k in live if k.agent_id not in kept}
            return confirm_page(
                request,
                self,
                title="Revoke these keys?",
                verb=f"Revoke {len(live)} key{'s' if len(live) != 1 else ''}",
                objects=[(f"{k.prefix}… of {k.agent.slug}{f' ({k.name})' if k.name else ''}", "") for k in live],
                counted=[
                    ("keys revoked: every request made with them is refused from now on", len(live)),
                    ("keys revoked already (left as they are)", len(keys) - len(live)),
                    ("agents left with no active key (they stop until given a new one)", len(stranded)),
                ],
                warning=(
                    f"{', '.join(sorted(stranded))} will have no active key left: every request of "
                    f"{'this agent' if len(stranded) == 1 else 'these agents'} is refused until a new key is made."
                    if stranded
                    else ""
                ),
                hidden=[("action", "revoke"), *((ACTION_CHECKBOX_NAME, str(k.pk)) for k in keys)],
                cancel_url=reverse("admin:memoryapp_agentkey_changelist"),
            )
        revoked = 0
        for key in live:
            agent_key_revoke(key=key, actor=_actor(request))
            revoked += 1
        messages.success(request, f"Revoked {revoked} key{'s' if revoked != 1 else ''}.")
        return None
