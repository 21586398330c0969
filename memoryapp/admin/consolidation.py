"""Admin pages of consolidation, for reviewers: playbook drafts waiting (side-by-side diff, the lessons
each changed rule names with their quotes, promote / discard), the items a dedupe pass marked stale
(with why, and an undo), and an entity's page (its other names, items and observation).

Who may: the "Reviewers" group (governance/staff/roles.py) holds `memoryapp.promote_playbook` and
`memoryapp.undo_stale` besides the views. Every decision goes through a service of
memoryapp.consolidation or memoryapp.items.services, which refuses with the reason and writes the
audit record (ids only) in the same transaction; this module holds no rule of its own.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils.html import escape, format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe

from governance.staff.adminlog import NamelessAdminLog
from governance.staff.lists import FullWidthList, cell_text
from memoryapp.admin.items import EntityNameSearch, ItemSubjectSearch
from memoryapp.admin.review import cut
from memoryapp.consolidation.fold import PLAYBOOK_DRAFT_PATH, draft_refusal, playbook_discard, playbook_promote
from memoryapp.consolidation.observations import statement_items, statement_text
from memoryapp.consolidation.selectors import (
    DraftReview,
    draft_review,
    drafts_waiting,
    entity_page,
    stale_by_dedupe,
)
from memoryapp.consolidation.state import scope_of
from memoryapp.errors import DomainError
from memoryapp.items.services import STALE_BECAUSE_KEY, item_stale_undo
from memoryapp.models import Agent, EntityOverview, MemoryItem, PlaybookDraft, StaleItem

PROMOTE_PERMISSION = "memoryapp.promote_playbook"
UNDO_STALE_PERMISSION = "memoryapp.undo_stale"
QUOTE_WINDOW = 160  # characters of an entry shown on each side of a quote


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


def _scope_label(row: Any) -> str:
    limits = [
        f"{name} {value}"
        for name, value in (("user", row.user_id), ("project", row.project_id), ("thread", row.thread_id))
        if value
    ]
    return " / ".join(limits) or "agent-wide"


def item_url(item_id: str) -> str:
    return reverse("admin:memoryapp_memoryitem_change", args=[item_id])


def thread_entry_url(thread_pk: int | None, entry_id: str | None) -> str:
    """The thread's admin page scrolled to the entry."""
    if thread_pk is None:
        return ""
    try:
        base = reverse("admin:memoryapp_thread_change", args=[thread_pk])
    except NoReverseMatch:
        base = f"/admin/memoryapp/thread/{thread_pk}/change/"
    return f"{base}#{entry_id}" if entry_id else base


def quoted_in(text: str, quote: str, *, window: int = QUOTE_WINDOW) -> SafeString:
    """The part of an entry around its quote, escaped, the quote in <mark> (whitespace aside)."""
    words = quote.split()
    found = re.search(r"\s*".join(re.escape(w) for w in words), text) if words else None
    if found is None:
        cut = text[: window * 2]
        return mark_safe(escape(cut) + (" …" if len(text) > len(cut) else ""))  # escaped
    start, end = found.span()
    left, right = max(0, start - window), min(len(text), end + window)
    return mark_safe(  # every piece escaped
        ("… " if left else "")
        + escape(text[left:start])
        + f"<mark>{escape(text[start:end])}</mark>"
        + escape(text[end:right])
        + (" …" if right < len(text) else "")
    )


@dataclass
class DiffRow:
    left_number: int | None
    left: str
    right_number: int | None
    right: str
    kind: str  # same | changed | added | removed


def side_by_side(older: str, newer: str) -> list[DiffRow]:
    """The two texts line by line, aligned, each row marked same, changed, added or removed."""
    a, b = older.splitlines(), newer.splitlines()
    rows: list[DiffRow] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            rows += [
                DiffRow(i + 1, a[i], j + 1, b[j], "same") for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            ]
            continue
        left, right = list(range(i1, i2)), list(range(j1, j2))
        for n in range(max(len(left), len(right))):
            i = left[n] if n < len(left) else None
            j = right[n] if n < len(right) else None
            kind = "changed" if i is not None and j is not None else ("removed" if j is None else "added")
            rows.append(
                DiffRow(
                    i + 1 if i is not None else None,
                    a[i] if i is not None else "",
                    j + 1 if j is not None else None,
                    b[j] if j is not None else "",
                    kind,
                )
            )
    return rows


# --- playbook drafts -----------------------------------------------------------------------------

# How the list and the page name why a draft cannot be promoted (the codes of `draft_refusal`).
REFUSAL_LABELS = {
    "playbook_changed": "Out of date: the playbook changed since it was drafted",
    "draft_by_model": "Written by a model",
    "draft_unknown": "Its base is not recorded",
}


def _refusal_shown(refusal: DomainError | None) -> dict[str, str] | None:
    """A refusal as the pages show it: a short label for the list, the whole reason for the page."""
    if refusal is None:
        return None
    return {
        "code": refusal.code,
        "label": REFUSAL_LABELS.get(refusal.code, "Cannot be promoted"),
        "reason": refusal.message,
    }


@admin.register(PlaybookDraft)
class PlaybookDraftAdmin(NamelessAdminLog, admin.ModelAdmin):
    """The drafts waiting, one page each to read and decide; nothing here edits a file by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("", view(self.drafts_view), name="memoryapp_playbookdraft_changelist"),
            path("<str:version_id>/review/", view(self.review_view), name="memoryapp_playbookdraft_review"),
            path("<str:version_id>/decide/", view(self.decide_view), name="memoryapp_playbookdraft_decide"),
            path("<str:version_id>/change/", view(self.review_redirect), name="memoryapp_playbookdraft_change"),
        ]

    def _page(self, request: HttpRequest, template: str, title: str, **context: Any) -> TemplateResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return TemplateResponse(
            request,
            f"admin/memoryapp/consolidation/{template}",
            {**self.admin_site.each_context(request), "opts": self.model._meta, "title": title, **context},
        )

    def drafts_view(self, request: HttpRequest) -> TemplateResponse:
        agent = request.GET.get("agent", "")
        drafts = drafts_waiting(agent_id=int(agent) if agent.isdigit() else None)
        return self._page(
            request,
            "drafts.html",
            "Playbook drafts waiting",
            drafts=[
                {
                    "draft": d,
                    "scope": _scope_label(d),
                    "refusal": _refusal_shown(draft_refusal(agent=d.agent, scope=scope_of(d), draft=d)),
                }
                for d in drafts
            ],
            agents=Agent.objects.order_by("slug"),
            chosen=agent,
        )

    def review_redirect(self, request: HttpRequest, version_id: str) -> HttpResponse:
        return HttpResponseRedirect(reverse("admin:memoryapp_playbookdraft_review", args=[version_id]))

    def _draft(self, version_id: str) -> PlaybookDraft:
        draft = PlaybookDraft.objects.select_related("agent").filter(pk=version_id, path=PLAYBOOK_DRAFT_PATH).first()
        if draft is None:
            raise Http404("No such draft.")
        return draft

    def review_view(self, request: HttpRequest, version_id: str) -> TemplateResponse:
        draft = self._draft(version_id)
        review: DraftReview = draft_review(draft=draft)
        head = (
            PlaybookDraft.objects.filter(
                agent=draft.agent,
                user_id=draft.user_id,
                project_id=draft.project_id,
                thread_id=draft.thread_id,
                path=PLAYBOOK_DRAFT_PATH,
            )
            .order_by("-sequence")
            .values_list("pk", flat=True)
            .first()
        )
        waiting = head == draft.pk and draft.sha256 != ""
        changes = [
            {
                "change": change,
                "lessons": [
                    {
                        "lesson": lesson,
                        "url": item_url(lesson.item_id),
                        "quotes": [
                            {
                                "quote": q,
                                "html": quoted_in(q.entry_text, q.quote),
                                "url": thread_entry_url(q.thread_pk, q.entry_id),
                            }
                            for q in lesson.quotes
                        ],
                    }
                    for lesson in change.lessons
                ],
            }
            for change in review.changes
        ]
        return self._page(
            request,
            "draft.html",
            f"Playbook draft of {draft.agent.slug} ({_scope_label(draft)})",
            draft=draft,
            review=review,
            rows=side_by_side(review.playbook_text, review.draft_text),
            changes=changes,
            waiting=waiting,
            refusal=_refusal_shown(draft_refusal(agent=draft.agent, scope=scope_of(draft), draft=draft))
            if waiting
            else None,
            may_decide=request.user.has_perm(PROMOTE_PERMISSION),
            scope=_scope_label(draft),
            is_nav_sidebar_enabled=False,  # the two columns need the width
        )

    def decide_view(self, request: HttpRequest, version_id: str) -> HttpResponse:
        """Promote or discard the draft the reviewer read (POST); refused with the reason, else audited."""
        if request.method != "POST":
            return self.review_redirect(request, version_id)
        if not request.user.has_perm(PROMOTE_PERMISSION):
            raise PermissionDenied
        draft = self._draft(version_id)
        action = request.POST.get("action", "")
        back = reverse("admin:memoryapp_playbookdraft_review", args=[version_id])
        try:
            if action == "promote":
                promotion = playbook_promote(
                    agent=draft.agent, scope=scope_of(draft), actor=_actor(request), draft_version_id=draft.pk
                )
                messages.success(
                    request,
                    f"Promoted: the playbook of {draft.agent.slug} ({_scope_label(draft)}) is now version "
                    f"{promotion.playbook.sequence}.",
                )
            elif action == "discard":
                playbook_discard(
                    agent=draft.agent, scope=scope_of(draft), actor=_actor(request), draft_version_id=draft.pk
                )
                messages.success(request, f"Discarded the draft of {draft.agent.slug} ({_scope_label(draft)}).")
            else:
                raise DomainError("invalid_value", "Choose promote or discard.", field="action")
        except DomainError as exc:
            messages.error(request, f"Not done: {exc.message}")
            return HttpResponseRedirect(back)
        return HttpResponseRedirect(reverse("admin:memoryapp_playbookdraft_changelist"))


# --- items a dedupe pass marked stale --------------------------------------------------------------


@admin.register(StaleItem)
class StaleItemAdmin(FullWidthList, NamelessAdminLog, ItemSubjectSearch):
    # At 1,280 px beside the filters: the value marked stale beside the value of the item kept (what a
    # reviewer compares before undoing the mark), both wrapping and leading to their items (the ids on
    # hover); the agent and the scope in one column.
    list_display = ("short_text", "reason", "kept_value", "slot", "where", "marked_at")
    list_filter = ("agent",)
    list_select_related = ("agent",)
    search_fields = ("=id", "subject", "attribute", "=user_id")
    show_full_result_count = False
    list_display_links = None
    actions = ["undo_stale"]

    class Media:
        css = {"all": ("governance/lists.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[StaleItem]:
        return StaleItem.objects.filter(pk__in=stale_by_dedupe().values("pk")).defer("embedding", "search_vector")

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The items kept, read once for the page (their values opened as the model opens them)."""
        changelist = super().get_changelist_instance(request)
        kept_ids = {str(self._because(row).get("kept") or "") for row in changelist.result_list} - {""}
        kept = MemoryItem.objects.filter(pk__in=kept_ids).defer("embedding", "search_vector")
        values = {item.pk: item.value for item in kept}
        for row in changelist.result_list:
            row.kept_values = values
        return changelist

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # nothing is deleted: a mark is undone

    def has_undo_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(UNDO_STALE_PERMISSION))

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(item_url(object_id))

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        title = {"title": "Items a dedupe pass marked stale"}
        return super().changelist_view(request, extra_context={**(extra_context or {}), **title})

    @staticmethod
    def _because(obj: MemoryItem) -> dict[str, Any]:
        because = (obj.metadata or {}).get(STALE_BECAUSE_KEY)
        return because if isinstance(because, dict) else {}

    @admin.display(description="value marked stale")
    def short_text(self, obj: StaleItem) -> SafeString:
        return format_html('<a href="{}" title="{}">{}</a>', item_url(obj.pk), obj.pk, cut(obj.value, 100) or "(empty)")

    @admin.display(description="why")
    def reason(self, obj: StaleItem) -> str:
        because = self._because(obj)
        return {"duplicate": "repeats the item kept", "contradiction": "the item kept contradicts it"}.get(
            str(because.get("reason")), str(because.get("reason", ""))
        )

    @admin.display(description="value of the item kept")
    def kept_value(self, obj: StaleItem) -> SafeString | str:
        kept = str(self._because(obj).get("kept") or "")
        if not kept:
            return "—"
        values: dict[str, str] = getattr(obj, "kept_values", {})
        if kept not in values:
            return format_html('<span class="gone" title="{}">(the item kept is gone)</span>', kept)
        return format_html('<a href="{}" title="{}">{}</a>', item_url(kept), kept, cut(values[kept], 100) or "(empty)")

    @admin.display(description="subject · attribute", ordering="subject")
    def slot(self, obj: StaleItem) -> str:
        return cut(f"{obj.subject} · {obj.attribute}", 60)

    @admin.display(description="agent · scope", ordering="agent__slug")
    def where(self, obj: StaleItem) -> SafeString:
        return format_html(
            '{}<br><span class="jr-about">{}</span>', cell_text(obj.agent.slug, 18), cell_text(_scope_label(obj), 22)
        )

    @admin.display(description="marked")
    def marked_at(self, obj: StaleItem) -> str:
        return str(self._because(obj).get("at", ""))[:10]

    @admin.action(description="Undo the stale mark (the item is active again)", permissions=["undo"])
    def undo_stale(self, request: HttpRequest, queryset: QuerySet[StaleItem]) -> None:
        done = refused = 0
        for item in queryset:
            try:
                item_stale_undo(item=item, actor=_actor(request))
                done += 1
            except DomainError:
                refused += 1
        self.message_user(
            request, f"{done} item(s) active again" + (f", {refused} no longer stale." if refused else ".")
        )


# --- entity pages --------------------------------------------------------------------------------


@admin.register(EntityOverview)
class EntityOverviewAdmin(EntityNameSearch):
    list_display = ("name", "agent", "scope", "other_names", "item_count")
    list_filter = ("agent",)
    list_select_related = ("agent",)
    search_fields = ("name", "normalized_name", "=user_id")
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[EntityOverview]:
        return super().get_queryset(request).annotate(item_total=Count("items"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="scope")
    def scope(self, obj: EntityOverview) -> str:
        return _scope_label(obj)

    @admin.display(description="other names")
    def other_names(self, obj: EntityOverview) -> str:
        return ", ".join(a for a in obj.aliases or [] if isinstance(a, str)) or "—"

    @admin.display(description="items")
    def item_count(self, obj: EntityOverview) -> int:
        return int(getattr(obj, "item_total", 0))

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        # The list links the admin-escaped id (nty_5F01… for nty_01…), as every admin link does.
        entity = EntityOverview.objects.select_related("agent").filter(pk=unquote(object_id)).first()
        if entity is None:
            raise Http404("No such entity.")
        page = entity_page(entity=entity)
        observations = [
            {
                "version": version,
                "scope": _scope_label(version),
                "observation": parsed,
                "statements": [
                    {"text": statement_text(s), "items": [(i, item_url(i)) for i in statement_items(s)]}
                    for s in (parsed.statements if parsed is not None else [])
                ],
                "history": reverse("admin:memoryapp_memoryfileversion_history")
                + "?"
                + urlencode(
                    {
                        "agent": str(version.agent_id),
                        "user_id": version.user_id,
                        "project_id": version.project_id,
                        "thread_id": version.thread_id,
                        "path": version.path,
                    }
                ),
            }
            for version, parsed in page.observations
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{entity.name} ({entity.agent.slug})",
            "entity": entity,
            "scope": _scope_label(entity),
            "aliases": [a for a in entity.aliases or [] if isinstance(a, str)],
            "items": [{"item": i, "url": item_url(i.pk), "scope": _scope_label(i)} for i in page.items],
            "observations": observations,
            "is_nav_sidebar_enabled": False,  # the values need the width
        }
        return TemplateResponse(request, "admin/memoryapp/consolidation/entity.html", context)
