"""Admin of memory items: the reviewers' queue, the item's decision page, "what did the agent know",
items and entities.

Who reviews: staff users with the built-in permission `memoryapp.change_memoryitem`, which only
the "Reviewers" group holds (governance/staff/roles.py); those who may only view items (privacy officers)
read the same pages without their buttons. Who lets items go (forget): those with
`memoryapp.forget_memoryitem`, the "Privacy officers". Every decision goes through the services
(`item_approve`, `item_reject`, `items_slot_decide`, `items_review_undo`, `item_forget`), which write
the audit record in the same transaction; this module holds no rule of its own.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from governance.console.review import item_reviews, last_decision_undoable, quotes_with_turns
from governance.crypto.keyring import encryption_enabled
from governance.staff.adminlog import NamelessAdminLog
from governance.staff.lists import FullWidthList, cell_text, day
from memoryapp.admin.person_links import export_person_url
from memoryapp.admin.review import (
    LAST_DECISION,
    REJECT_REASONS,
    REVIEW_PERMISSION,
    cards_for,
    cut,
    highlighted,
    queue_context,
    queue_decide,
    quote_spans,
    thread_entry_url,
    waiting_under,
)
from memoryapp.admin.threads import erase_person_url
from memoryapp.errors import DomainError
from memoryapp.items.selectors import (
    context_facts,
    entities_named,
    items_about,
    items_known,
    known_changes,
    known_reach,
    slot_history,
    thread_context_scope,
)
from memoryapp.items.services import item_forget, items_bulk_review
from memoryapp.models import Agent, Entity, MemoryItem, SubjectMention, Thread
from memoryapp.models.choices import ItemStatus
from memoryapp.search.access_log import item_accesses
from memoryapp.storable import time_in_range
from memoryapp.subjects.detect import key_people_set, mentions_record, rows_named

__all__ = ["MemoryItemAdmin", "highlighted", "quote_spans"]  # the last two: tests of the highlighting

FORGET_PERMISSION = "memoryapp.forget_memoryitem"
USES_PAGE = 50  # uses of an item (access log rows) a page of it shows; older ones a page at a time
ITEM_PAGE_WINDOW = 700  # characters of a quoted entry shown around its quotes on the item page
# metadata keys the item page shows in words (history, reason) rather than as raw JSON
REVIEW_KEYS = ("activatedAt", "reviewed_by", "edited_by_reviewer", "rejected_because")


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


def _may_review(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_staff and request.user.has_perm(REVIEW_PERMISSION))


def known_scope_caption(scope: dict[str, str], *, thread: Thread | None) -> str:
    """What "what did the agent know" shows, said in words: which items the scope reads."""
    if thread is not None:
        who = f"person {scope['user_id']}" if scope["user_id"] else "no person"
        project = f", project {scope['project_id']}" if scope["project_id"] else ""
        return (
            f"Thread {scope['thread_id']} ({who}{project}): exactly what a context built for this thread reads, "
            "the items of no scope, of its person, of its project and of the thread itself."
        )
    if scope["user_id"]:
        return (
            f"Person {scope['user_id']}: the items of no scope and the person's, with those tied to one of the "
            "person's threads (labelled with their thread)."
        )
    limits = ", ".join(f"{k.removesuffix('_id')} {v}" for k, v in scope.items() if v)
    return f"Items of no scope{f' and of {limits}' if limits else ''}: what every context of the agent reads."


def item_state(item: MemoryItem) -> str:
    """The status as a person reads it: a state let go says so, whatever status it had."""
    return "forgotten" if item.expired_at else item.status


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


class ForgottenFilter(admin.SimpleListFilter):
    title = "in memory"
    parameter_name = "forgotten"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "in memory"), ("yes", "forgotten")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(expired_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(expired_at__isnull=True)
        return queryset


class ItemSubjectSearch(admin.ModelAdmin):  # type: ignore[type-arg]
    """Search and sort of items by subject while subjects are sealed (encryption on): the search box
    finds an item by its id, person, namespace, a part of its attribute (plaintext) or its whole
    subject in any case (through the subject's keyed hash, `items_about`), and the subject column
    does not sort (it would sort ciphertext). With encryption off, the search fields and sorting as
    declared."""

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Any], search_term: str) -> Any:
        term = search_term.strip()
        if not encryption_enabled() or not term:
            return super().get_search_results(request, queryset, search_term)
        about = items_about(queryset, subject=term)
        plain = Q(pk=term) | Q(user_id=term) | Q(namespace=term) | Q(attribute__icontains=term)
        return queryset.filter(plain | Q(pk__in=about.values("pk"))), False

    def get_sortable_by(self, request: HttpRequest) -> Any:
        sortable = super().get_sortable_by(request)
        if encryption_enabled():
            return [name for name in sortable if name != "slot"]
        return sortable


@admin.register(MemoryItem)
class MemoryItemAdmin(FullWidthList, NamelessAdminLog, ItemSubjectSearch):
    # What tells items apart in a list, at 1,280 px beside the filters: the shared list cells
    # (governance.staff.lists, lists.css): ids shortened, text cut with the whole on hover, the value
    # wrapping and leading to the item (its id on hover). Confidence, verification and the end of
    # validity are on the item's page.
    list_display = (
        "agent_shown",
        "kind",
        "slot",
        "short_text",
        "trust",
        "state",
        "person",
        "valid_from_day",
        "recorded",
    )
    list_display_links = None
    list_filter = ("status", ForgottenFilter, "trust", "kind", "agent", UserIdFilter, "verified")
    list_select_related = ("agent",)
    show_full_result_count = False
    search_fields = ("=id", "subject", "attribute", "=user_id", "=namespace")
    ordering = ("-recorded_at",)
    actions = ["approve_selected", "reject_selected", "forget_selected"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryItem]:
        return super().get_queryset(request).defer("embedding", "search_vector", "keyword_hashes")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Writing only adds; forgetting keeps history. Removing an item's value is an erasure request's
        # (governance.erasure), reached from the item's page ("Erase this person…").
        return False

    def has_forget_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(FORGET_PERMISSION))

    class Media:
        css = {"all": ("governance/lists.css",)}

    @admin.display(description="subject · attribute", ordering="subject")
    def slot(self, obj: MemoryItem) -> SafeString:
        return format_html('<span class="cell-wrap">{}</span>', cut(f"{obj.subject} · {obj.attribute}", 80))

    @admin.display(description="value")
    def short_text(self, obj: MemoryItem) -> SafeString:
        url = reverse("admin:memoryapp_memoryitem_change", args=[quote(obj.pk)])
        return format_html('<a href="{}" title="{}">{}</a>', url, obj.pk, cut(obj.value, 80) or "(empty)")

    @admin.display(description="person", ordering="user_id")
    def person(self, obj: MemoryItem) -> SafeString:
        return cell_text(obj.user_id, 12)

    @admin.display(description="valid from", ordering="valid_from")
    def valid_from_day(self, obj: MemoryItem) -> SafeString:
        return day(obj.valid_from)

    @admin.display(description="agent", ordering="agent__slug")
    def agent_shown(self, obj: MemoryItem) -> SafeString:
        return cell_text(obj.agent.slug, 12)

    @admin.display(description="recorded", ordering="recorded_at")
    def recorded(self, obj: MemoryItem) -> SafeString:
        return day(obj.recorded_at)

    @admin.display(description="status", ordering="status")
    def state(self, obj: MemoryItem) -> str:
        return item_state(obj)

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

    @admin.action(description="Forget the selected items (history kept)", permissions=["forget"])
    def forget_selected(self, request: HttpRequest, queryset: QuerySet[MemoryItem]) -> None:
        for item in queryset:
            item_forget(item=item, actor=_actor(request))
        self.message_user(request, "The selected items were let go.")

    # -- custom pages --

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("review/", view(self.review_view), name="memoryapp_memoryitem_review"),
            path("known/", view(self.known_view), name="memoryapp_memoryitem_known"),
            path("<path:object_id>/decide/", view(self.decide_view), name="memoryapp_memoryitem_decide"),
            path("<path:object_id>/forget/", view(self.forget_view), name="memoryapp_memoryitem_forget"),
            *super().get_urls(),
        ]

    def _page(self, request: HttpRequest, title: str, **context: Any) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "title": title, "opts": self.model._meta, **context}

    def review_view(self, request: HttpRequest) -> HttpResponse:
        if not _may_review(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._decide(request)
        context = self._page(request, "Review queue", is_nav_sidebar_enabled=False, **queue_context(request))
        return TemplateResponse(request, "admin/memoryapp/review/queue.html", context)

    def _decide(self, request: HttpRequest) -> HttpResponse:
        """One decision posted by the queue; JSON for the page's script, else a redirect back."""
        wants_json = request.headers.get("x-requested-with") == "fetch"
        query = request.POST.get("query", "")
        back = reverse("admin:memoryapp_memoryitem_review") + ("?" + query if query else "")
        try:
            outcome = queue_decide(request, actor=_actor(request))
        except DomainError as exc:
            if wants_json:
                return JsonResponse({"ok": False, "message": exc.message, "field": exc.field}, status=exc.status)
            messages.error(request, exc.message)
            return HttpResponseRedirect(back)
        undo = request.POST.get("action") == "undo"
        request.session[LAST_DECISION] = "" if undo else outcome.decision
        if wants_json:
            return JsonResponse(
                {
                    "ok": True,
                    "message": outcome.message,
                    "status": outcome.status,
                    "ids": outcome.ids,
                    "decision": outcome.decision,
                    "items": outcome.restored,
                    "waiting": waiting_under(query),
                    **outcome.extra,
                }
            )
        messages.success(request, outcome.message)
        return HttpResponseRedirect(back)

    # -- the item's own page: a decision page --

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The item as a reviewer decides on it: value, quotes in their turns, history, the decisions.

        Items change only through the services, so there is no form to save.
        """
        item = self.get_object(request, unquote(object_id))
        if item is None:
            raise Http404("No such item.")
        if not self.has_view_or_change_permission(request, item):
            raise PermissionDenied
        if request.method != "GET":
            # No form here: decisions post to decide/ (reviewers) and nothing else changes an item.
            if not _may_review(request):
                raise PermissionDenied
            return HttpResponseNotAllowed(["GET"])
        read = quotes_with_turns(item_ids=[item.pk])
        card = cards_for([item], read, window=ITEM_PAGE_WINDOW)[item.pk]
        reviews = item_reviews(item=item)
        may_review = _may_review(request)
        thread = (
            Thread.objects.filter(agent_id=item.agent_id, external_id=item.thread_id).only("pk", "user_id").first()
            if item.thread_id
            else None
        )
        metadata = {k: v for k, v in (item.metadata or {}).items() if k not in REVIEW_KEYS}
        before = request.GET.get("uses_before", "")
        accesses = list(item_accesses(item=item, limit=USES_PAGE + 1, before=int(before) if before.isdigit() else None))
        older = accesses[USES_PAGE - 1].pk if len(accesses) > USES_PAGE else None
        accesses = accesses[:USES_PAGE]
        for access in accesses:
            access.thread_url = thread_entry_url(access.thread_id, None)  # type: ignore[attr-defined]
        context = self._page(
            request,
            f"{item.subject} · {item.attribute}",
            original=item,
            item=item,
            state=item_state(item),
            card=card,
            reviews=reviews,
            legacy_reason=(item.metadata or {}).get("rejected_because", "") if not reviews else "",
            slot_rows=slot_history(item=item),
            may_review=may_review,
            may_forget=self.has_forget_permission(request),
            erase_url=erase_person_url(request, item.user_id),
            undoable=last_decision_undoable(item=item, actor=_actor(request)) if may_review else None,
            reasons=REJECT_REASONS,
            thread_url=thread_entry_url(thread.pk, None) if thread else "",
            export_person_url=export_person_url(
                request, user_id=item.user_id or (thread.user_id if thread else ""), agent_id=item.agent_id
            ),
            metadata=metadata,
            accesses=accesses,
            uses_older_url=f"?uses_before={older}#item-uses" if older else "",
            uses_newest_url="?#item-uses" if before.isdigit() else "",
            has_view_permission=True,
            is_nav_sidebar_enabled=False,  # the quotes need the width
        )
        return TemplateResponse(request, "admin/memoryapp/memoryitem/decision.html", context)

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Approve, approve with an edit, reject or undo from the item page (POST only)."""
        if not _may_review(request):
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseRedirect(reverse("admin:memoryapp_memoryitem_change", args=[object_id]))
        page = reverse("admin:memoryapp_memoryitem_change", args=[object_id])
        try:
            if request.POST.get("item") != unquote(object_id) and request.POST.get("action") != "undo":
                raise DomainError("invalid_value", "The form is not this item's.", field="item")
            outcome = queue_decide(request, actor=_actor(request))
        except DomainError as exc:
            messages.error(request, exc.message)
            return HttpResponseRedirect(page)
        messages.success(request, outcome.message)
        return HttpResponseRedirect(page)

    def forget_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Forget one item: a page that says what goes, then the service on POST (privacy officers)."""
        if not (request.user.is_active and request.user.is_staff and self.has_forget_permission(request)):
            raise PermissionDenied
        item = self.get_object(request, unquote(object_id))
        if item is None:
            raise Http404("No such item.")
        page = reverse("admin:memoryapp_memoryitem_change", args=[item.pk])
        if item.expired_at is not None:
            messages.info(request, "This item was forgotten already.")
            return HttpResponseRedirect(page)
        if request.method == "POST":
            item_forget(item=item, actor=_actor(request))
            messages.success(
                request, "Forgotten: the item left every context; its history, quotes and audit records stay."
            )
            return HttpResponseRedirect(page)
        holds_now = item.status == ItemStatus.ACTIVE and (item.valid_to is None or item.valid_to > timezone.now())
        context = self._page(request, "Forget this item?", item=item, state=item_state(item), holds_now=holds_now)
        return TemplateResponse(request, "admin/memoryapp/memoryitem/forget.html", context)

    # -- what did the agent know --

    def known_view(self, request: HttpRequest) -> HttpResponse:
        """What did the agent know: the items of a scope that held at a moment, as memory knew them then;
        with a second moment, what changed between the two."""
        if not _may_review(request):
            raise PermissionDenied
        agents = Agent.objects.order_by("slug")
        agent_pk = _int(request.GET.get("agent"))
        agent = agents.filter(pk=agent_pk).first() if agent_pk is not None else None
        scope: dict[str, Any] = {k: request.GET.get(k, "").strip() for k in ("user_id", "project_id", "thread_id")}
        at_text = request.GET.get("at", "").strip()
        then_text = request.GET.get("compare", "").strip()
        at, then = _parse_local(at_text), _parse_local(then_text)
        world = request.GET.get("world") == "1"  # read with what memory knows now instead of what it knew then
        rows: list[MemoryItem] = []
        lines: list[str] = []
        changes = None
        error = ""
        typed = dict(scope)
        thread = None
        if agent is not None and scope["thread_id"]:
            # A thread's context reads its person and project too: show what it read, not a narrower scope.
            thread = Thread.objects.filter(agent=agent, external_id=scope["thread_id"]).first()
            if thread is None:
                error = f"{agent.slug} has no thread {scope['thread_id']!r}."
            else:
                scope = asdict(thread_context_scope(thread))
        if (at_text and at is None) or (then_text and then is None):
            error = "The time is not one I can read; use the picker (UTC)."
        if agent is not None and at is not None and not error:
            rows = items_known(agent=agent, at=at, world=world, **scope)
            known_at = None if world else at
            lines = [f.text for f in context_facts(agent=agent, as_of=at, known_at=known_at, **scope)]
            if then is not None:
                earlier, later = sorted([at, then])
                changes = known_changes(
                    earlier=items_known(agent=agent, at=earlier, world=world, **scope),
                    later=items_known(agent=agent, at=later, world=world, **scope),
                )
        context = self._page(
            request,
            "What did the agent know?",
            is_nav_sidebar_enabled=False,  # the table needs the width
            agents=agents,
            agent=agent,
            scope=scope,
            at_text=at_text or (timezone.now() - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S"),
            compare_text=then_text,
            at=at,
            then=then,
            world=world,
            rows=[(r, known_reach(r), item_state(r)) for r in rows],
            lines=lines,
            changes=changes,
            moments=sorted([at, then]) if at and then else None,
            error=error,
            asked=agent is not None and at is not None and not error,
            thread=thread,
            scope_shown=known_scope_caption(scope, thread=thread),
            overridden=[
                (name, typed[name], scope[name])
                for name in ("user_id", "project_id")
                if thread is not None and typed[name] and typed[name] != scope[name]
            ],
        )
        return TemplateResponse(request, "admin/memoryapp/review/known.html", context)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = dict(extra_context or {})
        # The queue and "what did the agent know" are the reviewers' pages: offered only to them.
        extra["may_review"] = _may_review(request)
        if extra["may_review"]:
            extra["suggested_waiting"] = MemoryItem.objects.filter(
                status=ItemStatus.SUGGESTED, expired_at__isnull=True
            ).count()
        return super().changelist_view(request, extra_context=extra)


class EntityNameSearch(NamelessAdminLog, admin.ModelAdmin):  # type: ignore[type-arg]
    """Search and sort of entities by name while names are sealed (encryption on): the search box
    finds a whole name (through its keyed hash) or a person id, and the name column does not sort
    (it would sort ciphertext). With encryption off, the search fields and sorting as declared."""

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Any], search_term: str) -> Any:
        if not encryption_enabled() or not search_term.strip():
            return super().get_search_results(request, queryset, search_term)
        named = entities_named(queryset, name=search_term)
        return queryset.filter(Q(pk__in=named.values("pk")) | Q(user_id=search_term.strip())), False

    def get_sortable_by(self, request: HttpRequest) -> Any:
        sortable = super().get_sortable_by(request)
        if encryption_enabled():
            return [name for name in sortable if name != "name"]
        return sortable


@admin.register(Entity)
class EntityAdmin(EntityNameSearch):
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

    def save_model(self, request: HttpRequest, obj: Entity, form: Any, change: bool) -> None:
        """A staff edit of the name or aliases: saved, and whom of the agent's people they name now
        is in the subject index (memoryapp.subjects.detect), in the same transaction."""
        with transaction.atomic():
            # Whom it names seals it too (Entity.key_people): the people named before stay in the set.
            written = [(SubjectMention.Table.ENTITY, obj.pk, obj)]
            named = rows_named(agent_id=obj.agent_id, rows=written)
            key_people_set(obj, {*named.get(obj.pk, ()), *(obj.key_people or ())})
            super().save_model(request, obj, form, change)
            mentions_record(agent_id=obj.agent_id, rows=written, replace=True, named=named)

    @admin.display(description="items that hold now")
    def items_now(self, obj: Entity) -> SafeString:
        rows = MemoryItem.objects.filter(entity=obj, status__in=[ItemStatus.ACTIVE, ItemStatus.SUPERSEDED])
        rows = rows.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=timezone.now()), expired_at__isnull=True)
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a>: {}',
            (
                (reverse("admin:memoryapp_memoryitem_change", args=[r.pk]), r.attribute, cut(r.value, 120))
                for r in rows.only("id", "attribute", "value").order_by("attribute")[:100]
            ),
        ) or mark_safe("—")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


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
