"""Screening at write in the admin (memoryapp.screening):

- "Screening policies": an agent's action per category, for operators, saved through
  `screening_policy_set` (checked as the API checks it, audited), never by the form itself.
- "Held entries": the turns screening held, for reviewers to release into memory and privacy
  officers to delete (with what stood on them, through `entries_forget`).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from governance.staff.adminlog import NamelessAdminLog
from governance.staff.lists import FullWidthList, cell_text, day
from memoryapp.forgetting.services import entries_forget
from memoryapp.models import HeldEntry, ScreeningSettings
from memoryapp.screening.policy import ACTIONS, DEFAULTS, LABELS, policy_effective, screening_policy_set
from memoryapp.threads.screened import entry_hold_release


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


def _action_field(category: str) -> forms.ChoiceField:
    return forms.ChoiceField(
        choices=[(action, action) for action in ACTIONS],
        help_text=f"{LABELS[category]} (default {DEFAULTS[category]})",
    )


class ScreeningSettingsForm(forms.ModelForm):
    """One choice per category, filled with the agent's effective policy."""

    email = _action_field("email")
    phone = _action_field("phone")
    payment_card = _action_field("payment_card")
    iban = _action_field("iban")
    national_id = _action_field("national_id")
    ip_address = _action_field("ip_address")
    secret = _action_field("secret")
    person = _action_field("person")

    class Meta:
        model = ScreeningSettings
        fields: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        effective = policy_effective(self.instance.screening)
        for category in DEFAULTS:
            self.fields[category].initial = effective[category]


@admin.register(ScreeningSettings)
class ScreeningSettingsAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    form = ScreeningSettingsForm
    list_display = ("slug", *(f"shown_{category}" for category in DEFAULTS))
    search_fields = ("slug",)
    fields = tuple(DEFAULTS)

    class Media:
        css = {"all": ("governance/lists.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # every agent has one: the defaults until changed

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: ScreeningSettings, form: Any, change: bool) -> None:
        values = {category: form.cleaned_data[category] for category in DEFAULTS if category in form.changed_data}
        screening_policy_set(agent=obj, values=values, actor=_actor(request))

    def __getattr__(self, name: str) -> Any:
        # One column per category: `shown_email`, ... (the effective action).
        if name.startswith("shown_") and name[6:] in DEFAULTS:
            category = name[6:]

            def shown(obj: ScreeningSettings) -> str:
                return policy_effective(obj.screening)[category]

            shown.short_description = category  # type: ignore[attr-defined]
            return shown
        raise AttributeError(name)


@admin.register(HeldEntry)
class HeldEntryAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    list_display = ("id", "agent", "thread", "seq", "role", "short_text", "held")
    list_filter = ("agent",)
    list_select_related = ("agent", "thread")
    show_full_result_count = False
    actions = ["release", "delete_held"]
    fields = ("agent", "thread", "seq", "role", "text", "held_at", "created_at")
    readonly_fields = fields

    class Media:
        css = {"all": ("governance/lists.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[HeldEntry]:
        return (
            HeldEntry.objects.filter(held_at__isnull=False)
            .defer("embedding", "search_vector", "keyword_hashes")
            .order_by("-held_at")
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # through the `delete_held` action, which takes what stands on the entry too

    def has_release_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("memoryapp.release_heldentry"))

    def has_delete_held_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("memoryapp.delete_heldentry"))

    @admin.display(description="text")
    def short_text(self, obj: HeldEntry) -> SafeString:
        return cell_text(obj.text, 120)

    @admin.display(description="held", ordering="held_at")
    def held(self, obj: HeldEntry) -> SafeString:
        return day(obj.held_at)

    @admin.action(description="Release the selected entries into memory", permissions=["release"])
    def release(self, request: HttpRequest, queryset: QuerySet[HeldEntry]) -> None:
        released = sum(
            entry_hold_release(entry=entry, actor=_actor(request)) for entry in queryset.select_related("thread")
        )
        self.message_user(request, f"{released} entries released.", messages.SUCCESS)

    @admin.action(description="Delete the selected entries (and what stands on them)", permissions=["delete_held"])
    def delete_held(self, request: HttpRequest, queryset: QuerySet[HeldEntry]) -> None:
        deleted = 0
        for entry in queryset.select_related("agent"):
            counts = entries_forget(agent=entry.agent, entry_ids=[entry.pk], actor=_actor(request), because="screening")
            deleted += counts.get("entries_deleted", 0)
        self.message_user(request, f"{deleted} entries deleted.", messages.SUCCESS)
