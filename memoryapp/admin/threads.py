"""Admin of threads and entries: the thread list, a thread read as a conversation, entry details.

Staff read conversations here; what they change goes through the thread services (so a delete
splices and audits, a redaction keeps the place): this module holds no rule of its own. Every
delete and redaction first shows what it takes with it (`governance.staff.confirm`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.postgres.search import SearchQuery
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from governance.crypto.keyring import encryption_enabled
from governance.staff.adminlog import NamelessAdminLog
from governance.staff.confirm import apply_and_report, confirm_page, confirmed, staff_actor
from governance.staff.lists import DateRangeFilter, FullWidthList, cell_text, id_cell, moment, presence_filter, short_id
from memoryapp.admin.conversation import conversation_turns, thread_url, turn_link
from memoryapp.admin.person_links import export_person_url
from memoryapp.admin.review import REVIEW_PERMISSION
from memoryapp.compaction.services import compaction_request
from memoryapp.errors import DomainError
from memoryapp.extraction.services import extraction_request
from memoryapp.forgetting.services import entry_delete, entry_redact, thread_delete
from memoryapp.ids import person_id_check
from memoryapp.models import Entry, Evidence, Thread
from memoryapp.search.websearch import entries_typed_match
from memoryapp.threads.columns import ENTRY_FIELD_NAMES, ENTRY_LIGHT_DEFER
from memoryapp.threads.conversation import PAGE_TURNS, conversation_page
from memoryapp.threads.services import thread_update

PREVIEW_CHARS = 120
# What a page parameter naming an entry may be (entry ids are at most 40 characters): anything
# else is not looked up at all (a NUL would not even reach PostgreSQL as a string).
_ENTRY_PARAM_MAX = 40


# Who may file an erasure request (governance.staff.roles: privacy officers).
ERASURE_PERMISSION = "governance.add_erasurerequest"


def erase_person_url(request: HttpRequest, user_id: str) -> str:
    """The form filing an erasure request of this person (prefilled), for staff who may file one."""
    if not user_id or not request.user.has_perm(ERASURE_PERMISSION):
        return ""
    return reverse("admin:governance_erasurerequest_add") + "?" + urlencode({"user_id": user_id})


def known_url(request: HttpRequest, thread: Thread) -> str:
    """ "What did the agent know?" for this thread, now, filled in (reviewers only: "" for others)."""
    if not request.user.has_perm(REVIEW_PERMISSION):
        return ""
    at = timezone.now().strftime("%Y-%m-%dT%H:%M:%S")
    query = urlencode({"agent": thread.agent_id, "thread_id": thread.external_id, "at": at})
    return reverse("admin:memoryapp_memoryitem_known") + "?" + query


def _actor(request: HttpRequest) -> str:
    return staff_actor(request)


class EstimatedCountPaginator(Paginator):
    """Counts of an unfiltered list from the planner's statistics, not a scan of the table.

    A filtered or searched list is counted exactly (its filters use indexes); the full list of a
    table of millions of rows would otherwise cost a sequential scan on every page view.
    """

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if isinstance(queryset, QuerySet) and not queryset.query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [queryset.model._meta.db_table],
                )
                row = cursor.fetchone()
            if row and row[0] and row[0] > 10_000:
                return int(row[0])
        return super().count


def preview(entry: Entry, limit: int = PREVIEW_CHARS) -> str:
    text = " ".join((entry.text or "").split())
    if not text and entry.event is not None:
        text = str(entry.event)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _entry_param(request: HttpRequest, name: str) -> str | None:
    value = request.GET.get(name) or None
    if value is not None and (len(value) > _ENTRY_PARAM_MAX or "\x00" in value):
        raise DomainError("unknown_entry", f"`{name}` is not an entry of this thread.", field=name)
    return value


class PersonForm(forms.Form):
    user_id = forms.CharField(
        label="Person (user id)",
        max_length=128,
        required=False,
        help_text="Whose conversation this is: an erasure or export of a person takes the threads with their id. "
        "Empty: about no one.",
    )

    def clean_user_id(self) -> str:
        value = (self.cleaned_data.get("user_id") or "").strip()
        if "\x00" in value:
            raise forms.ValidationError("A user id has no NUL character.")
        try:
            # The one rule of person ids (the API's): every person stored is one an erasure can name.
            return person_id_check(value)
        except DomainError as exc:
            raise forms.ValidationError(exc.message) from exc


@admin.register(Thread)
class ThreadAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    # At 1,280 px beside the filters: a client-chosen id may be 128 characters without a space, so ids
    # are cut in the middle and wrap (all of them on hover); the agent and the person are cut too.
    list_display = ("thread_link", "agent_shown", "person", "entries_written", "forked_from_link", "updated")
    list_display_links = None
    list_select_related = ("agent", "forked_from")
    search_fields = ("external_id", "user_id", "agent__slug")
    list_filter = ("agent",)
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    actions = ["delete_threads"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # agents create threads over the API

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # Django's lists rows; ours counts what goes (delete_threads)
        return actions

    @admin.display(description="thread", ordering="external_id")
    def thread_link(self, obj: Thread) -> SafeString:
        return format_html('<a href="{}">{}</a>', thread_url(obj.pk), id_cell(obj.external_id))

    @admin.display(description="agent", ordering="agent__slug")
    def agent_shown(self, obj: Thread) -> SafeString:
        return cell_text(obj.agent.slug, 18)

    @admin.display(description="person", ordering="user_id")
    def person(self, obj: Thread) -> SafeString:
        return cell_text(obj.user_id, 24)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: Thread) -> SafeString:
        return moment(obj.updated_at)

    @admin.display(description="entries written")
    def entries_written(self, obj: Thread) -> int:
        # next_seq counts every entry ever added: no COUNT(*) per row of the list.
        return obj.next_seq - 1

    @admin.display(description="forked from")
    def forked_from_link(self, obj: Thread) -> str:
        if obj.forked_from is None:
            return ""
        url = reverse("admin:memoryapp_thread_change", args=[obj.forked_from.pk])
        return format_html('<a href="{}">{}</a>', url, id_cell(obj.forked_from.external_id, 24))

    # --- the thread's page: its conversation ---------------------------------------------------

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The thread read as a conversation (there is no form: the fields that matter for
        governance change on their own pages, through audited services)."""
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET"])
        thread = self.get_object(request, unquote(object_id))
        if thread is None:
            raise Http404(f"No {self.opts.verbose_name} with the id {object_id!r}.")
        if not self.has_view_or_change_permission(request, thread):
            raise PermissionDenied
        try:
            page = conversation_page(
                thread=thread,
                leaf_id=_entry_param(request, "leaf"),
                anchor_id=_entry_param(request, "entry"),
                before_id=_entry_param(request, "before"),
                after_id=_entry_param(request, "after"),
                from_start=request.GET.get("start") == "1",
            )
        except DomainError as exc:
            messages.error(request, f"{exc.message} Showing the newest turns of the active branch instead.")
            page = conversation_page(thread=thread)
        turns = conversation_turns(page, item_links=request.user.has_perm("memoryapp.view_memoryitem"))
        leaf_param = page.leaf_id if not page.active and page.leaf_id else ""
        first, last = (page.entries[0].id, page.entries[-1].id) if page.entries else ("", "")
        may_change = self.has_change_permission(request, thread)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Thread {thread.external_id}",
            "subtitle": None,
            "original": thread,
            "thread": thread,
            "page": page,
            "turns": turns,
            "page_size": PAGE_TURNS,
            "earlier_url": thread_url(thread.pk, leaf=leaf_param, before=first) if page.more_earlier else "",
            "later_url": thread_url(thread.pk, leaf=leaf_param, after=last) if page.more_later else "",
            "start_url": thread_url(thread.pk, leaf=leaf_param, start="1") if page.more_earlier else "",
            "newest_url": thread_url(thread.pk, leaf=leaf_param) if page.more_later else "",
            "active_url": thread_url(thread.pk),
            "forked_from_link": (
                turn_link(page.forked_from.thread_pk, page.forked_from.at_entry_id)
                if page.forked_from and page.forked_from.at_entry_id
                else thread_url(page.forked_from.thread_pk)
                if page.forked_from
                else ""
            ),
            "fork_rows": [
                (fork, thread_url(fork.thread_pk), turn_link(thread.pk, fork.at_entry_id) if fork.at_entry_id else "")
                for fork in page.forks
            ],
            "extraction": self.extraction_mark(thread),
            "may_run_jobs": may_change,
            "may_change_person": may_change,
            "export_person_url": export_person_url(request, user_id=thread.user_id, agent_id=thread.agent_id),
            "may_delete": self.has_delete_permission(request, thread),
            "erase_url": erase_person_url(request, thread.user_id),
            "agent_url": reverse("admin:memoryapp_agent_change", args=[thread.agent_id]),
            "known_url": known_url(request, thread),
            "strategies": (
                ("clear-old-tool-results", "clear old tool results (no model)"),
                ("summarize-old-preserve-recent", "summarize old, keep recent"),
                ("hierarchical", "hierarchical"),
            ),
            "is_popup": False,
            "has_view_permission": True,
        }
        return TemplateResponse(request, "admin/memoryapp/thread/conversation.html", context)

    def extraction_mark(self, obj: Thread) -> str:
        progress = obj.extraction or {}
        if not progress:
            return "not run yet"
        failed = progress.get("failed") or []
        retrying = f"; {len(failed)} window(s) to try again" if failed else ""
        return f"extracted through seq {progress.get('through_seq', 0)}{retrying}"

    def get_urls(self) -> list[Any]:
        own = [
            path("<int:pk>/compact/", self.admin_site.admin_view(self.compact_view), name="memoryapp_thread_compact"),
            path("<int:pk>/extract/", self.admin_site.admin_view(self.extract_view), name="memoryapp_thread_extract"),
            path("<int:pk>/person/", self.admin_site.admin_view(self.person_view), name="memoryapp_thread_person"),
        ]
        return own + super().get_urls()

    # --- actions of their own: jobs, the person ------------------------------------------------

    def _thread_to_change(self, request: HttpRequest, pk: int) -> Thread:
        thread = self.get_object(request, str(pk))
        if thread is None or not self.has_change_permission(request, thread):
            raise PermissionDenied
        return thread

    def _job_message(self, request: HttpRequest, what: str, run: Any) -> None:
        url = reverse("admin:governance_jobrun_change", args=[run.pk])
        messages.success(request, format_html('{} queued as <a href="{}">job run #{}</a>.', what, url, run.pk))

    def compact_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """ "Compact now": enqueue a compaction job of the thread (the service checks the strategy)."""

        thread = self._thread_to_change(request, pk)
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        strategy = request.POST.get("strategy", "clear-old-tool-results")
        try:
            run = compaction_request(thread=thread, strategy=strategy, options={}, actor=_actor(request))
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            self._job_message(request, f"Compaction ({strategy})", run)
        return HttpResponseRedirect(thread_url(thread.pk))

    def extract_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """ "Extract now": enqueue the thread's extraction job."""

        thread = self._thread_to_change(request, pk)
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        run = extraction_request(thread=thread, actor=_actor(request))
        self._job_message(request, "Extraction", run)
        return HttpResponseRedirect(thread_url(thread.pk))

    def person_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Whose thread it is: changed only here, through `thread_update` (audited, both ids)."""
        thread = self._thread_to_change(request, pk)
        form = PersonForm(request.POST if request.method == "POST" else None, initial={"user_id": thread.user_id})
        if request.method == "POST" and form.is_valid():
            before = thread.user_id
            try:
                thread_update(thread=thread, user_id=form.cleaned_data["user_id"], actor=_actor(request))
            except DomainError as exc:
                form.add_error("user_id", exc.message)
            else:
                if thread.user_id == before:
                    messages.info(request, "The person is unchanged.")
                else:
                    messages.success(request, f"The thread's person is now {thread.user_id or '(no one)'}.")
                return HttpResponseRedirect(thread_url(thread.pk))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": thread,
            "title": f"Person of thread {thread.external_id}",
            "form": form,
        }
        return TemplateResponse(request, "admin/memoryapp/thread/person.html", context)

    # --- deletes, counted first ------------------------------------------------------------------

    def _delete_steps(self, request: HttpRequest, threads: list[Thread]) -> list[tuple[str, Any]]:
        actor = _actor(request)
        return [(t.external_id, lambda t=t: thread_delete(thread=t, actor=actor)) for t in threads]

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None) -> Any:
        thread = self.get_object(request, unquote(object_id))
        if thread is None:
            raise Http404(f"No {self.opts.verbose_name} with the id {object_id!r}.")
        if not self.has_delete_permission(request, thread):
            raise PermissionDenied
        steps = self._delete_steps(request, [thread])
        if confirmed(request):
            apply_and_report(request, steps=steps, done=f"Deleted thread {thread.external_id}")
            return HttpResponseRedirect(reverse("admin:memoryapp_thread_changelist"))
        return confirm_page(
            request,
            self,
            title=f"Delete thread {thread.external_id}?",
            verb="Delete the thread",
            objects=[(f"{thread.external_id} (agent {thread.agent.slug})", thread_url(thread.pk))],
            steps=steps,
            cancel_url=thread_url(thread.pk),
        )

    @admin.action(description="Delete the selected threads (shows what goes first)", permissions=["delete"])
    def delete_threads(self, request: HttpRequest, queryset: QuerySet[Thread]) -> HttpResponse | None:
        threads = list(queryset.select_related("agent").order_by("pk"))
        steps = self._delete_steps(request, threads)
        if confirmed(request):
            apply_and_report(request, steps=steps, done=f"Deleted {len(threads)} thread(s)")
            return None
        return confirm_page(
            request,
            self,
            title=f"Delete {len(threads)} thread(s)?",
            verb="Delete the threads",
            objects=[(f"{t.external_id} (agent {t.agent.slug})", thread_url(t.pk)) for t in threads],
            steps=steps,
            hidden=[("action", "delete_threads"), *(("_selected_action", str(t.pk)) for t in threads)],
            cancel_url=reverse("admin:memoryapp_thread_changelist"),
        )


@admin.register(Entry)
class EntryAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    list_display = ("entry_link", "thread_link", "seq", "who", "short_text", "created")
    list_select_related = ("thread",)
    list_filter = (
        "type",
        "role",
        ("redacted_at", presence_filter("redacted", empty="words kept", present="redacted")),
        ("created_at", DateRangeFilter),
    )
    search_fields = ("=id",)  # and the words of the text: get_search_results
    search_help_text = 'Words of the text (full-text: stems, "a phrase", -word), or an entry id.'
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    raw_id_fields = ("agent", "thread", "parent")
    exclude = ENTRY_LIGHT_DEFER
    # Every field but the heavy ones, read-only, from the model's own list: the parent as a link to
    # its page, the content shown as its text (redaction marked) followed by the items standing on it.
    readonly_fields = tuple(
        shown
        for name in ENTRY_FIELD_NAMES
        if name != "text"
        for shown in {"parent": ("parent_link",), "content": ("text_shown", "standing_items")}.get(name, (name,))
    )
    fields = readonly_fields
    actions = ["redact_entries", "delete_entries"]
    change_form_template = "admin/memoryapp/entry/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Entry]:
        return super().get_queryset(request).defer(*ENTRY_LIGHT_DEFER)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # an entry changes only by redaction or delete, each with its own page

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Entry], search_term: str
    ) -> tuple[QuerySet[Entry], bool]:
        """An entry id finds that entry; words search the text through its full-text index
        (`entry_search_thread_gin`): "shellfish" finds "Shellfish makes me ill". With encryption on the
        full-text column is empty for sealed texts: the words are looked up in the blind index."""
        term = search_term.strip()
        if not term or "\x00" in term:
            return queryset, False
        if " " not in term and Entry.objects.filter(pk=term).exists():
            return queryset.filter(pk=term), False
        if encryption_enabled():
            return queryset.filter(entries_typed_match(term)), False
        # Words as a person types them (websearch_to_tsquery: "a phrase", or, -word), English stems.
        query = SearchQuery(term, config="english", search_type="websearch")
        return queryset.filter(search_vector=query), False

    @admin.display(description="id", ordering="pk")
    def entry_link(self, obj: Entry) -> SafeString:
        url = reverse("admin:memoryapp_entry_change", args=[quote(obj.pk)])
        return format_html('<a href="{}" title="{}">{}</a>', url, obj.pk, short_id(obj.pk))

    @admin.display(description="thread", ordering="thread__external_id")
    def thread_link(self, obj: Entry) -> SafeString:
        name = obj.thread.external_id
        return format_html(
            '<a href="{}" title="{} (this turn in its conversation)">{}</a>',
            turn_link(obj.thread_id, obj.id),
            name,
            name if len(name) <= 22 else name[:21] + "…",
        )

    @admin.display(description="who")
    def who(self, obj: Entry) -> SafeString:
        """Who spoke (name and role), or which tool answered, or which event it is."""
        if obj.type == "tool_result":
            text = f"tool · {obj.tool_name}" if obj.tool_name else "tool"
        elif obj.type != "message":
            text = obj.type.replace("_", " ")
        else:
            text = f"{obj.sender_name} · {obj.role}" if obj.sender_name else obj.role
        return cell_text(text, 22)

    @admin.display(description="text")
    def short_text(self, obj: Entry) -> SafeString:
        return cell_text(preview(obj, limit=2000), 90)

    @admin.display(description="written", ordering="created_at")
    def created(self, obj: Entry) -> SafeString:
        return moment(obj.created_at)

    @admin.display(description="redacted", boolean=True)
    def redacted(self, obj: Entry) -> bool:
        return obj.redacted_at is not None

    @admin.display(description="parent")
    def parent_link(self, obj: Entry) -> str:
        if not obj.parent_id:
            return "(root)"
        url = reverse("admin:memoryapp_entry_change", args=[quote(obj.parent_id)])
        return format_html('<a href="{}">{}</a>', url, obj.parent_id)

    @admin.display(description="text")
    def text_shown(self, obj: Entry) -> SafeString:
        return format_html('<div class="entry-text">{}</div>', obj.text or "")

    @admin.display(description="memory standing on it")
    def standing_items(self, obj: Entry) -> SafeString:
        """The memory items that quote this entry (their evidence): what a redaction would touch."""
        quoted = list(
            Evidence.objects.filter(agent_id=obj.agent_id, entry_id=obj.pk)
            .select_related("item")
            .only("quote", "status", "item__id", "item__subject", "item__attribute", "item__value", "item__status")
            .order_by("created_at")[:100]
        )
        if not quoted:
            return mark_safe("none")
        rows = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>“{}”</td></tr>',
            (
                (
                    reverse("admin:memoryapp_memoryitem_change", args=[quote(e.item.pk)]),
                    e.item.pk,
                    f"{e.item.subject} · {e.item.attribute}",
                    cell_text(e.item.value, 80),
                    e.item.status,
                    cell_text(e.quote, 120),
                )
                for e in quoted
            ),
        )
        return format_html(
            '<table class="standing-items"><thead><tr><th>item</th><th>slot</th><th>value</th><th>status</th>'
            "<th>quote</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    def has_redact_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Redacting destroys what was said: it takes the delete permission, not a view of entries.
        return bool(request.user.has_perm("memoryapp.delete_entry"))

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        entry = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if entry is not None:
            context.update(
                conversation_url=turn_link(entry.thread_id, entry.id),
                redact_url=reverse("admin:memoryapp_entry_redact", args=[quote(entry.pk)])
                if self.has_redact_permission(request) and entry.redacted_at is None
                else "",
                delete_url=reverse("admin:memoryapp_entry_delete", args=[quote(entry.pk)])
                if self.has_delete_permission(request, entry)
                else "",
            )
        return super().change_view(request, object_id, form_url, extra_context=context)

    def get_urls(self) -> list[Any]:
        return [
            path(
                "<path:object_id>/redact/",
                self.admin_site.admin_view(self.redact_view),
                name="memoryapp_entry_redact",
            ),
            *super().get_urls(),
        ]

    # --- redaction and deletes, counted first ------------------------------------------------------

    def _redact_steps(self, request: HttpRequest, entries: list[Entry], reason: str) -> list[tuple[str, Any]]:
        actor = _actor(request)
        return [(e.pk, lambda e=e: entry_redact(entry=e, reason=reason, actor=actor)) for e in entries]

    def _delete_steps(self, request: HttpRequest, entries: list[Entry]) -> list[tuple[str, Any]]:
        actor = _actor(request)
        # Newest first: a splice never moves a child under an entry that goes next.
        ordered = sorted(entries, key=lambda e: (e.thread_id, -e.seq))
        return [(e.pk, lambda e=e: entry_delete(entry=e, actor=actor)) for e in ordered]

    def _reason(self, request: HttpRequest) -> tuple[str, str]:
        reason = " ".join(request.POST.get("reason", "").split())
        if not reason:
            return "", "Say why (the reason is kept on the entry, not in the audit trail)."
        if len(reason) > 500 or "\x00" in reason:
            return "", "A reason is at most 500 characters."
        return reason, ""

    def _entry_objects(self, entries: list[Entry]) -> list[tuple[str, str]]:
        return [
            (f"{e.pk} (#{e.seq} of {e.thread.external_id}): {preview(e, 80)}", turn_link(e.thread_id, e.pk))
            for e in entries
        ]

    def redact_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One entry's redaction: what it takes, a reason, then confirm."""
        entry = self.get_object(request, unquote(object_id))
        if entry is None:
            raise Http404(f"No {self.opts.verbose_name} with the id {object_id!r}.")
        if not self.has_redact_permission(request):
            raise PermissionDenied
        reason, error = self._reason(request) if confirmed(request) else ("", "")
        if confirmed(request) and not error:
            apply_and_report(request, steps=self._redact_steps(request, [entry], reason), done=f"Redacted {entry.pk}")
            return HttpResponseRedirect(turn_link(entry.thread_id, entry.pk))
        return confirm_page(
            request,
            self,
            title=f"Redact entry {entry.pk}?",
            verb="Redact",
            objects=self._entry_objects([entry]),
            steps=self._redact_steps(request, [entry], ""),
            ask_reason=True,
            reason_error=error,
            cancel_url=reverse("admin:memoryapp_entry_change", args=[quote(entry.pk)]),
        )

    @admin.action(description="Redact the selected entries (shows what goes first)", permissions=["redact"])
    def redact_entries(self, request: HttpRequest, queryset: QuerySet[Entry]) -> HttpResponse | None:
        entries = list(queryset.select_related("thread").order_by("thread_id", "seq")[:1000])
        reason, error = self._reason(request) if confirmed(request) else ("", "")
        if confirmed(request) and not error:
            apply_and_report(
                request, steps=self._redact_steps(request, entries, reason), done=f"Redacted {len(entries)} entries"
            )
            return None
        return confirm_page(
            request,
            self,
            title=f"Redact {len(entries)} entries?",
            verb="Redact",
            objects=self._entry_objects(entries),
            steps=self._redact_steps(request, entries, ""),
            hidden=[("action", "redact_entries"), *(("_selected_action", e.pk) for e in entries)],
            ask_reason=True,
            reason_error=error,
            cancel_url=reverse("admin:memoryapp_entry_changelist"),
        )

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None) -> Any:
        entry = self.get_object(request, unquote(object_id))
        if entry is None:
            raise Http404(f"No {self.opts.verbose_name} with the id {object_id!r}.")
        if not self.has_delete_permission(request, entry):
            raise PermissionDenied
        steps = self._delete_steps(request, [entry])
        if confirmed(request):
            apply_and_report(request, steps=steps, done=f"Deleted entry {entry.pk}")
            return HttpResponseRedirect(thread_url(entry.thread_id))
        return confirm_page(
            request,
            self,
            title=f"Delete entry {entry.pk}?",
            verb="Delete",
            objects=self._entry_objects([entry]),
            steps=steps,
            cancel_url=reverse("admin:memoryapp_entry_change", args=[quote(entry.pk)]),
        )

    @admin.action(description="Delete the selected entries (shows what goes first)", permissions=["delete"])
    def delete_entries(self, request: HttpRequest, queryset: QuerySet[Entry]) -> HttpResponse | None:
        entries = list(queryset.select_related("thread").order_by("thread_id", "seq")[:1000])
        steps = self._delete_steps(request, entries)
        if confirmed(request):
            apply_and_report(request, steps=steps, done=f"Deleted {len(entries)} entries")
            return None
        return confirm_page(
            request,
            self,
            title=f"Delete {len(entries)} entries?",
            verb="Delete",
            objects=self._entry_objects(entries),
            steps=steps,
            hidden=[("action", "delete_entries"), *(("_selected_action", e.pk) for e in entries)],
            cancel_url=reverse("admin:memoryapp_entry_changelist"),
        )
