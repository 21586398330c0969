"""Admin of memory items: the reviewers' queue, "what did the agent know", items and entities.

Who reviews: staff users with the built-in permission `memoryapp.change_memoryitem`, which only
the "Reviewers" group holds (governance/roles.py). Every decision goes through `item_approve` / `item_reject` /
`item_forget`, which write the audit record in the same transaction; this module holds no rule
of its own.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from memoryapp.errors import DomainError
from memoryapp.models import Agent, Entity, Entry, Evidence, MemoryItem
from memoryapp.models.choices import EvidenceStatus, ItemKind, ItemStatus, Trust
from memoryapp.selectors.items import context_facts, items_holding, slot_history
from memoryapp.services.items import item_approve, item_forget, item_reject, items_bulk_review
from memoryapp.storable import time_in_range

REVIEW_PERMISSION = "memoryapp.change_memoryitem"
QUEUE_PAGE = 100
ENTRY_WINDOW = 280  # characters of an entry shown on each side of its quotes
TURN_CHARS = 220  # characters of the turns shown around a quoted entry
REJECT_REASONS = ("wrong", "not about this person", "too vague", "duplicate", "sensitive", "a guess, not said")


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


def _may_review(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_staff and request.user.has_perm(REVIEW_PERMISSION))


# --- quotes highlighted in their entries --------------------------------------------------------


def quote_spans(text: str, quotes: list[str]) -> list[tuple[int, int]]:
    """Where each quote stands in the text, whitespace aside (as `verify_evidence` reads it), merged."""
    spans: list[tuple[int, int]] = []
    for quote in quotes:
        words = quote.split()
        if not words:
            continue
        pattern = r"\s*".join(re.escape(w) for w in words)
        spans.extend(m.span() for m in re.finditer(pattern, text))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def highlighted(text: str, quotes: list[str], *, window: int = ENTRY_WINDOW) -> SafeString:
    """The entry's text, escaped, each quote in <mark>, cut to `window` characters around the quotes."""
    spans = quote_spans(text, quotes)
    if not spans:
        return mark_safe(escape(_cut(text, window * 2)))  # escaped above
    parts: list[str] = []
    cursor = max(0, spans[0][0] - window)
    if cursor > 0:
        parts.append("… ")
    for start, end in spans:
        if start - cursor > window * 2:  # a long stretch between two quotes: keep its ends
            parts.append(escape(text[cursor : cursor + window]) + " … ")
            cursor = start - window
        parts.append(escape(text[cursor:start]))
        parts.append(f"<mark>{escape(text[start:end])}</mark>")
        cursor = end
    tail_end = min(len(text), cursor + window)
    parts.append(escape(text[cursor:tail_end]))
    if tail_end < len(text):
        parts.append(" …")
    return mark_safe("".join(parts))  # every piece escaped


def _cut(text: str, limit: int) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- the queue -----------------------------------------------------------------------------------


@dataclass
class Turn:
    role: str
    text: str
    entry_id: str


@dataclass
class Quoted:
    entry: Entry | None
    thread_pk: int | None
    thread_external_id: str
    html: SafeString
    url: str
    quotes: list[str]
    holds: bool
    before: Turn | None = None
    after: Turn | None = None


@dataclass
class Card:
    item: MemoryItem
    quoted: list[Quoted] = field(default_factory=list)
    unplaced: list[Evidence] = field(default_factory=list)  # quotes whose entry is gone
    now_value: str | None = None


@dataclass
class Group:
    agent: Agent
    user_id: str
    cards: list[Card] = field(default_factory=list)


def _turn(entry: Entry | None) -> Turn | None:
    if entry is None:
        return None
    text = "[redacted]" if entry.redacted_at else _cut(entry.text, TURN_CHARS)
    return Turn(role=entry.role or entry.type, text=text, entry_id=entry.id)


def review_queue(
    *, agent_id: int | None = None, user_id: str | None = None, kind: str = "", trust: str = "", limit: int = QUEUE_PAGE
) -> tuple[list[Group], int]:
    """The suggested items a reviewer goes through, grouped by agent and person, newest first.

    Returns the groups of this page and the number of suggested items waiting under the filters.
    """
    waiting = MemoryItem.objects.filter(status=ItemStatus.SUGGESTED, expired_at__isnull=True)
    if agent_id:
        waiting = waiting.filter(agent_id=agent_id)
    if user_id is not None:
        waiting = waiting.filter(user_id=user_id)
    if kind:
        waiting = waiting.filter(kind=kind)
    if trust:
        waiting = waiting.filter(trust=trust)
    total = waiting.count()
    items = list(
        waiting.select_related("agent").defer("embedding", "search_vector").order_by("-recorded_at", "-id")[:limit]
    )
    cards = {item.pk: Card(item=item) for item in items}

    evidence = list(
        Evidence.objects.filter(item_id__in=list(cards))
        .select_related("entry", "entry__thread")
        .defer("entry__embedding", "entry__search_vector")
        .order_by("created_at", "id")
    )
    entries = {e.entry_id: e.entry for e in evidence if e.entry is not None}
    parents = {
        e.id: e
        for e in Entry.objects.filter(id__in=[x.parent_id for x in entries.values() if x.parent_id]).only(
            "id", "role", "type", "text", "redacted_at"
        )
    }
    children: dict[str, Entry] = {}
    for child in (
        Entry.objects.filter(parent_id__in=list(entries))
        .only("id", "parent_id", "role", "type", "text", "redacted_at", "seq")
        .order_by("seq")
    ):
        children.setdefault(str(child.parent_id), child)

    for card in cards.values():
        by_entry: OrderedDict[str, list[Evidence]] = OrderedDict()
        for ev in (e for e in evidence if e.item_id == card.item.pk):
            if ev.entry is None:
                card.unplaced.append(ev)
            else:
                by_entry.setdefault(ev.entry.id, []).append(ev)
        for entry_id, quotes in by_entry.items():
            entry = entries[entry_id]
            texts = [q.quote for q in quotes]
            card.quoted.append(
                Quoted(
                    entry=entry,
                    thread_pk=entry.thread_id,
                    thread_external_id=entry.thread.external_id,
                    html=highlighted("[redacted]" if entry.redacted_at else entry.text, texts),
                    url=thread_entry_url(entry.thread_id, entry.id),
                    quotes=texts,
                    holds=all(q.status == EvidenceStatus.VERIFIED for q in quotes),
                    before=_turn(parents.get(str(entry.parent_id))) if entry.parent_id else None,
                    after=_turn(children.get(entry.id)),
                )
            )
    _attach_current_values(list(cards.values()))

    groups: OrderedDict[tuple[int, str], Group] = OrderedDict()
    for item in items:
        key = (item.agent_id, item.user_id)
        if key not in groups:
            groups[key] = Group(agent=item.agent, user_id=item.user_id)
        groups[key].cards.append(cards[item.pk])
    return list(groups.values()), total


def _attach_current_values(cards: list[Card]) -> None:
    """The value each card's slot holds now in its exact scope: what approving it would replace."""
    if not cards:
        return
    wanted = Q()
    for card in cards:
        i = card.item
        wanted |= Q(
            agent_id=i.agent_id,
            user_id=i.user_id,
            project_id=i.project_id,
            thread_id=i.thread_id,
            subject=i.subject,
            attribute=i.attribute,
        )
    now = timezone.now()
    held = (
        MemoryItem.objects.filter(wanted, status__in=[ItemStatus.ACTIVE, ItemStatus.SUPERSEDED])
        .filter(Q(valid_from__lte=now), Q(valid_to__isnull=True) | Q(valid_to__gt=now), expired_at__isnull=True)
        .only("agent_id", "user_id", "project_id", "thread_id", "subject", "attribute", "value")
    )
    by_slot = {(h.agent_id, h.user_id, h.project_id, h.thread_id, h.subject, h.attribute): h.value for h in held}
    for card in cards:
        i = card.item
        card.now_value = by_slot.get((i.agent_id, i.user_id, i.project_id, i.thread_id, i.subject, i.attribute))


# --- admin classes -------------------------------------------------------------------------------


class UserIdFilter(admin.SimpleListFilter):
    """A person filter typed in (there may be far too many people to list)."""

    title = "person (user_id)"
    parameter_name = "user_id"
    template = "admin/memoryapp/review/input_filter.html"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("", "")]  # the template shows an input; Django needs one lookup to render the filter

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(user_id=value) if value else queryset


class EvidenceInline(admin.TabularInline):
    model = Evidence
    extra = 0
    can_delete = False
    fields = ("quote", "status", "entry_link", "created_at")
    readonly_fields = ("quote", "status", "entry_link", "created_at")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="entry")
    def entry_link(self, obj: Evidence) -> str:
        if obj.entry_id is None:
            return "(entry gone)"
        thread_pk = obj.entry.thread_id if obj.entry else None
        return format_html('<a href="{}">{}</a>', thread_entry_url(thread_pk, obj.entry_id), obj.entry_id)


@admin.register(MemoryItem)
class MemoryItemAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "agent",
        "kind",
        "subject",
        "attribute",
        "short_value",
        "trust",
        "status",
        "confidence",
        "verified",
        "user_id",
        "valid_from",
        "valid_to",
        "recorded_at",
    )
    list_filter = ("status", "trust", "kind", "agent", UserIdFilter, "verified")
    list_select_related = ("agent",)
    show_full_result_count = False
    search_fields = ("=id", "subject", "attribute", "=user_id", "=namespace")
    ordering = ("-recorded_at",)
    date_hierarchy = None
    inlines = [EvidenceInline]
    actions = ["approve_selected", "reject_selected", "forget_selected"]
    # Items change only through the services (merge, timeline, audit): the page shows them.
    fields = (
        "id",
        "agent",
        "kind",
        "entity",
        "subject",
        "attribute",
        "value",
        "value_json",
        "namespace",
        "trust",
        "status",
        "confidence",
        "verified",
        "user_id",
        "project_id",
        "thread_id",
        "valid_from",
        "valid_to",
        "recorded_at",
        "expired_at",
        "expires_at",
        "times_retrieved",
        "last_retrieved_at",
        "prompt_version",
        "metadata",
        "history",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryItem]:
        return super().get_queryset(request).defer("embedding", "search_vector")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # writing only adds; forgetting keeps history, erasure goes through its request

    @admin.display(description="value")
    def short_value(self, obj: MemoryItem) -> str:
        return _cut(obj.value, 80)

    @admin.display(description="slot history")
    def history(self, obj: MemoryItem) -> SafeString:
        rows = slot_history(item=obj)
        body = format_html_join(
            "",
            '<tr{}><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (
                (
                    mark_safe(' style="font-weight:bold"') if r.pk == obj.pk else "",
                    reverse("admin:memoryapp_memoryitem_change", args=[r.pk]),
                    r.pk,
                    _cut(r.value, 120),
                    r.status + (" (let go)" if r.expired_at else ""),
                    r.trust,
                    _when(r.valid_from),
                    _when(r.valid_to) if r.valid_to else "open",
                    _when(r.recorded_at),
                )
                for r in rows
            ),
        )
        return format_html(
            '<table class="slot-history"><thead><tr><th>item</th><th>value</th><th>status</th><th>trust</th>'
            "<th>valid from</th><th>valid to</th><th>recorded</th></tr></thead><tbody>{}</tbody></table>",
            body,
        )

    # -- actions (through the services, so every decision is audited) --

    @admin.action(description="Approve the selected suggested items", permissions=["change"])
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[MemoryItem]) -> None:
        counts = items_bulk_review(
            item_ids=list(queryset.values_list("pk", flat=True)), actor=_actor(request), approve=True
        )
        self.message_user(request, f"{counts['done']} approved, {counts['skipped']} not suggested (left as they were).")

    @admin.action(description="Reject the selected suggested items", permissions=["change"])
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[MemoryItem]) -> None:
        counts = items_bulk_review(
            item_ids=list(queryset.values_list("pk", flat=True)),
            actor=_actor(request),
            approve=False,
            reason="rejected from the item list",
        )
        self.message_user(request, f"{counts['done']} rejected, {counts['skipped']} not suggested (left as they were).")

    @admin.action(description="Forget the selected items (history kept)", permissions=["change"])
    def forget_selected(self, request: HttpRequest, queryset: QuerySet[MemoryItem]) -> None:
        for item in queryset:
            item_forget(item=item, actor=_actor(request))
        self.message_user(request, "The selected items were let go.")

    # -- custom pages --

    def get_urls(self) -> list[Any]:
        return [
            path("review/", self.admin_site.admin_view(self.review_view), name="memoryapp_memoryitem_review"),
            path("known/", self.admin_site.admin_view(self.known_view), name="memoryapp_memoryitem_known"),
            *super().get_urls(),
        ]

    def review_view(self, request: HttpRequest) -> HttpResponse:
        if not _may_review(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._decide(request)
        agent_id = _int(request.GET.get("agent"))
        user_id = request.GET.get("user_id")
        kind = request.GET.get("kind", "")
        trust = request.GET.get("trust", "")
        groups, total = review_queue(
            agent_id=agent_id,
            user_id=user_id if user_id not in (None, "") else None,
            kind=kind if kind in ItemKind.values else "",
            trust=trust if trust in Trust.values else "",
        )
        shown = sum(len(g.cards) for g in groups)
        context = {
            **self.admin_site.each_context(request),
            "title": "Review queue",
            "opts": self.model._meta,
            "is_nav_sidebar_enabled": False,  # the cards need the width
            "groups": groups,
            "total": total,
            "shown": shown,
            "agents": Agent.objects.order_by("slug"),
            "kinds": ItemKind.values,
            "trusts": Trust.values,
            "filters": {"agent": agent_id or "", "user_id": user_id or "", "kind": kind, "trust": trust},
            "reasons": REJECT_REASONS,
            "query": request.GET.urlencode(),
        }
        return TemplateResponse(request, "admin/memoryapp/review/queue.html", context)

    def _decide(self, request: HttpRequest) -> HttpResponse:
        """One decision (approve, reject, bulk) posted by the queue; JSON for the page's script, else a redirect."""
        wants_json = request.headers.get("x-requested-with") == "fetch"
        action = request.POST.get("action", "")
        actor = _actor(request)
        outcome: dict[str, Any]
        back = reverse("admin:memoryapp_memoryitem_review") + (
            "?" + request.POST["query"] if request.POST.get("query") else ""
        )
        try:
            if action in ("approve", "reject"):
                item = MemoryItem.objects.filter(pk=request.POST.get("item", "")).first()
                if item is None:
                    raise DomainError("not_found", "That item no longer exists.", status=404)
                if action == "approve":
                    value = request.POST.get("value")
                    done = item_approve(item=item, actor=actor, value=value)
                    outcome = {"id": done.pk, "status": done.status, "value": done.value}
                    text = "Approved" + (" with the edited value." if done.metadata.get("edited_by_reviewer") else ".")
                else:
                    reason = request.POST.get("reason", "").strip()
                    if not reason:
                        raise DomainError("invalid_value", "Say why it is rejected.", field="reason")
                    done = item_reject(item=item, actor=actor, reason=reason)
                    outcome = {"id": done.pk, "status": done.status}
                    text = "Rejected."
            elif action in ("bulk_approve", "bulk_reject"):
                ids = request.POST.getlist("selected")
                if not ids:
                    raise DomainError("invalid_value", "Select items first (x).", field="selected")
                reason = request.POST.get("reason", "").strip()
                if action == "bulk_reject" and not reason:
                    raise DomainError("invalid_value", "Say why they are rejected.", field="reason")
                counts = items_bulk_review(item_ids=ids, actor=actor, approve=action == "bulk_approve", reason=reason)
                verb = "approved" if action == "bulk_approve" else "rejected"
                outcome = {"ids": ids, "status": "active" if action == "bulk_approve" else "rejected", **counts}
                text = f"{counts['done']} {verb}" + (
                    f", {counts['skipped']} already decided." if counts["skipped"] else "."
                )
            else:
                raise DomainError("invalid_value", "Unknown decision.", field="action")
        except DomainError as exc:
            if wants_json:
                return JsonResponse({"ok": False, "message": exc.message, "field": exc.field}, status=exc.status)
            messages.error(request, exc.message)
            return HttpResponseRedirect(back)
        if wants_json:
            return JsonResponse({"ok": True, "message": text, **outcome})
        messages.success(request, text)
        return HttpResponseRedirect(back)

    def known_view(self, request: HttpRequest) -> HttpResponse:
        """What did the agent know: the items of a scope that held at a moment, as memory knew them then."""
        if not _may_review(request):
            raise PermissionDenied
        agents = Agent.objects.order_by("slug")
        agent_pk = _int(request.GET.get("agent"))
        agent = agents.filter(pk=agent_pk).first() if agent_pk is not None else None
        scope = {k: request.GET.get(k, "").strip() for k in ("user_id", "project_id", "thread_id")}
        at_text = request.GET.get("at", "").strip()
        at = _parse_local(at_text)
        world = request.GET.get("world") == "1"  # read with what memory knows now instead of what it knew then
        rows: list[MemoryItem] = []
        lines: list[str] = []
        error = ""
        if at_text and at is None:
            error = "The time is not one I can read; use the picker (UTC)."
        if agent is not None and at is not None:
            known_at = None if world else at
            rows = list(
                items_holding(agent=agent, as_of=at, known_at=known_at, **scope)
                .defer("embedding", "search_vector")
                .order_by("subject", "attribute", "-valid_from")
            )
            lines = [f.text for f in context_facts(agent=agent, as_of=at, known_at=known_at, **scope)]
        context = {
            **self.admin_site.each_context(request),
            "title": "What did the agent know?",
            "opts": self.model._meta,
            "agents": agents,
            "agent": agent,
            "scope": scope,
            "at_text": at_text or (timezone.now() - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M"),
            "at": at,
            "world": world,
            "rows": rows,
            "lines": lines,
            "error": error,
            "asked": agent is not None and at is not None,
        }
        return TemplateResponse(request, "admin/memoryapp/review/known.html", context)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = dict(extra_context or {})
        extra["suggested_waiting"] = MemoryItem.objects.filter(
            status=ItemStatus.SUGGESTED, expired_at__isnull=True
        ).count()
        return super().changelist_view(request, extra_context=extra)


@admin.register(Entity)
class EntityAdmin(admin.ModelAdmin):
    list_display = ("name", "agent", "user_id", "project_id", "thread_id", "created_at")
    list_filter = ("agent",)
    list_select_related = ("agent",)
    search_fields = ("name", "normalized_name", "=user_id")
    show_full_result_count = False
    readonly_fields = (
        "id",
        "agent",
        "normalized_name",
        "user_id",
        "project_id",
        "thread_id",
        "created_at",
        "items_now",
    )
    fields = (
        "id",
        "agent",
        "name",
        "aliases",
        "normalized_name",
        "user_id",
        "project_id",
        "thread_id",
        "created_at",
        "items_now",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # entities come from the items written about them

    @admin.display(description="items that hold now")
    def items_now(self, obj: Entity) -> SafeString:
        rows = MemoryItem.objects.filter(entity=obj, status__in=[ItemStatus.ACTIVE, ItemStatus.SUPERSEDED])
        rows = rows.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=timezone.now()), expired_at__isnull=True)
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a>: {}',
            (
                (reverse("admin:memoryapp_memoryitem_change", args=[r.pk]), r.attribute, _cut(r.value, 120))
                for r in rows.only("id", "attribute", "value").order_by("attribute")[:100]
            ),
        ) or mark_safe("—")


def thread_entry_url(thread_pk: int | None, entry_id: str | None) -> str:
    """The thread's admin page (the threads area's) scrolled to the entry."""
    if thread_pk is None:
        return "#"
    try:
        base = reverse("admin:memoryapp_thread_change", args=[thread_pk])
    except NoReverseMatch:  # the thread admin is not registered: the conventional address
        base = f"/admin/memoryapp/thread/{thread_pk}/change/"
    return f"{base}#{entry_id}" if entry_id else base


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M") if at else ""


def _parse_local(text: str) -> datetime | None:
    """A datetime-local value (read as UTC), or an ISO time with its zone."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, timezone.get_fixed_timezone(0))
    try:
        # 9999-12-31T23:59-05:00 is past year 9999 in UTC: the queries would overflow.
        return time_in_range(parsed, field="at")
    except DomainError:
        return None


def queue_url(**params: Any) -> str:
    query = urlencode({k: v for k, v in params.items() if v})
    return reverse("admin:memoryapp_memoryitem_review") + (f"?{query}" if query else "")
