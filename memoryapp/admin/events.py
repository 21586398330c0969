"""Admin pages of change events for operators: webhooks (URL, secret, state) and their delivery attempts.

A webhook's page shows how far its delivery is (delivered up to which event, how many are behind),
its failures (the last error, since when, until when it rests) and its newest attempts; the
deliveries list filters the failed ones. Saving and deleting go through the audited services.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from governance.staff.adminlog import NamelessAdminLog
from governance.staff.lists import FullWidthList, cell_text, day
from memoryapp.admin.shown_once import secret_show_once, secrets_page
from memoryapp.errors import DomainError
from memoryapp.events.webhooks import (
    webhook_behind,
    webhook_create,
    webhook_delete,
    webhook_update,
    webhook_url_check,
)
from memoryapp.models import EventCounter, Webhook, WebhookDelivery

RECENT_ATTEMPTS = 20


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


class WebhookForm(forms.ModelForm):
    url = forms.URLField(max_length=2000, assume_scheme="https", help_text="http(s) URL that receives the events.")
    secret = forms.CharField(
        required=False,
        max_length=200,
        # Never written back into the page: whoever may view a webhook must not read its secret.
        widget=forms.PasswordInput(render_value=False),
        help_text="Shared with the receiver, which checks X-Memory-Signature with it. Left empty: one is "
        "generated (shown once, after saving) for a new webhook, and the secret kept for one that exists.",
    )

    class Meta:
        model = Webhook
        fields = ("agent", "url", "secret", "active")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial["secret"] = ""

    def clean_url(self) -> str:
        # The service's own check, as a form error (not a 500 when the service refuses it on save).
        url = str(self.cleaned_data.get("url") or "")
        try:
            return webhook_url_check(url)
        except DomainError as exc:
            raise forms.ValidationError(exc.message) from exc


class FailingFilter(admin.SimpleListFilter):
    title = "delivery"
    parameter_name = "delivery"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("failing", "failing (last attempt failed)"), ("resting", "resting after failures")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Webhook]) -> QuerySet[Webhook]:
        if self.value() == "failing":
            return queryset.filter(failures__gt=0)
        if self.value() == "resting":
            return queryset.filter(paused_until__isnull=False)
        return queryset


@admin.register(Webhook)
class WebhookAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    form = WebhookForm
    # At 1,280 px beside the filters: the URL cut (all of it on hover), the failures and the last error
    # (wrapping) in sight; the day of the last delivery.
    list_display = (
        "url_link",
        "agent_shown",
        "active",
        "delivered",
        "behind",
        "failures",
        "last_success",
        "error_shown",
    )
    list_display_links = None
    list_filter = ("active", FailingFilter)
    list_select_related = ("agent",)
    search_fields = ("url", "agent__slug")
    readonly_fields = (
        "delivered_seq",
        "behind",
        "failures",
        "last_error",
        "last_failure_at",
        "last_success_at",
        "paused_until",
        "created_at",
        "recent_attempts",
    )

    def get_fields(self, request: HttpRequest, obj: Webhook | None = None) -> Any:
        # A page its reader cannot save shows every field as read-only text: the secret is no field of it.
        fields = super().get_fields(request, obj)
        if obj is not None and not self.has_change_permission(request, obj):
            return [name for name in fields if name != "secret"]
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Webhook | None = None) -> Any:
        # A webhook stays its agent's: another agent's events go to a webhook of that agent.
        fields = super().get_readonly_fields(request, obj)
        return (*fields, "agent") if obj is not None else fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Webhook]:
        # The list's `behind` column from one query, not one per webhook.
        last = EventCounter.objects.filter(agent_id=OuterRef("agent_id")).values("last_seq")[:1]
        return super().get_queryset(request).annotate(agent_last_seq=Subquery(last))

    @admin.display(description="behind")
    def behind(self, obj: Webhook) -> int:
        if hasattr(obj, "agent_last_seq"):
            return max(0, (obj.agent_last_seq or 0) - obj.delivered_seq)
        return webhook_behind(webhook=obj)

    class Media:
        css = {"all": ("governance/lists.css",)}

    @admin.display(description="url", ordering="url")
    def url_link(self, obj: Webhook) -> SafeString:
        url = reverse("admin:memoryapp_webhook_change", args=[obj.pk])
        shown = obj.url if len(obj.url) <= 60 else obj.url[:59] + "…"
        return format_html('<a href="{}" class="cell-id" title="{}">{}</a>', url, obj.url, shown)

    @admin.display(description="agent", ordering="agent__slug")
    def agent_shown(self, obj: Webhook) -> SafeString:
        return cell_text(obj.agent.slug, 16)

    @admin.display(description="delivered up to event", ordering="delivered_seq")
    def delivered(self, obj: Webhook) -> int:
        return obj.delivered_seq

    @admin.display(description="last delivery", ordering="last_success_at")
    def last_success(self, obj: Webhook) -> SafeString:
        return day(obj.last_success_at)

    @admin.display(description="last error")
    def error_shown(self, obj: Webhook) -> str:
        error = obj.last_error or ""
        return error if len(error) <= 120 else error[:119] + "…"

    @admin.display(description="newest attempts")
    def recent_attempts(self, obj: Webhook) -> SafeString | str:
        attempts = list(WebhookDelivery.objects.filter(webhook=obj).order_by("-at", "-id")[:RECENT_ATTEMPTS])
        if not attempts:
            return "none yet"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{} to {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    a.at.strftime("%Y-%m-%d %H:%M:%S"),
                    a.first_seq,
                    a.last_seq,
                    a.attempt,
                    "ok" if a.ok else "failed",
                    a.status_code if a.status_code is not None else "—",
                    a.error[:200],
                )
                for a in attempts
            ),
        )
        link = reverse("admin:memoryapp_webhookdelivery_changelist") + f"?webhook__id__exact={obj.pk}"
        return format_html(
            "<table><tr><th>at</th><th>events</th><th>attempt</th><th>outcome</th><th>status</th><th>error</th></tr>"
            '{}</table><p><a href="{}">every attempt</a></p>',
            rows,
            link,
        )

    def save_model(self, request: HttpRequest, obj: Webhook, form: Any, change: bool) -> None:
        data = form.cleaned_data
        if change:
            saved = webhook_update(
                webhook=obj,
                url=data["url"],
                secret=data.get("secret") or "",
                active=data["active"],
                actor=_actor(request),
            )
        else:
            saved = webhook_create(
                agent=data["agent"],
                url=data["url"],
                secret=data.get("secret") or "",
                active=data["active"],
                actor=_actor(request),
            )
            if not data.get("secret"):
                # On the page of this response only, never in a cookie (memoryapp.admin.shown_once).
                secret_show_once(
                    request,
                    label=f"Secret of the webhook to {saved.url}",
                    value=saved.secret,
                    note="Give it to the receiver now: it checks the X-Memory-Signature header with it.",
                )
        obj.pk, obj.secret, obj.delivered_seq = saved.pk, saved.secret, saved.delivered_seq

    def response_add(self, request: HttpRequest, obj: Webhook, post_url_continue: str | None = None) -> HttpResponse:
        page = secrets_page(
            request,
            admin_site=self.admin_site,
            title="New webhook",
            next_url=reverse("admin:memoryapp_webhook_change", args=[obj.pk]),
            said=f"The webhook to {obj.url} was added.",
        )
        return page if page is not None else super().response_add(request, obj, post_url_continue)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        # A webhook's delivery attempts are its log: they go with it. No role deletes them alone (their
        # admin is read-only), which Django's confirmation took for a missing permission, so no
        # operator could delete a webhook that had ever been tried (issue 23).
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        perms_needed.discard(WebhookDelivery._meta.verbose_name)
        return deleted, counts, perms_needed, protected

    def delete_model(self, request: HttpRequest, obj: Webhook) -> None:
        webhook_delete(webhook=obj, actor=_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Webhook]) -> None:
        for webhook in queryset:
            webhook_delete(webhook=webhook, actor=_actor(request))


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(NamelessAdminLog, admin.ModelAdmin):
    list_display = ("at", "webhook", "first_seq", "last_seq", "events", "attempt", "ok", "status_code", "error_shown")
    list_filter = ("ok", "webhook")
    list_select_related = ("webhook", "webhook__agent")
    raw_id_fields = ("webhook",)
    show_full_result_count = False  # a long log: no full count on every page

    @admin.display(description="error")
    def error_shown(self, obj: WebhookDelivery) -> str:
        return obj.error[:200]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
