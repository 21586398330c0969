"""Admin of the audit trail and the job runs: both read-only lists that fit the screen, with their
ids as links to the objects they name (looked up a page at a time, never a query per row)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from governance.audit.chain import audit_verification_latest, audit_verify
from governance.audit.pseudonyms import is_pseudonym, pseudonymize, pseudonyms_resolve
from governance.jobs.retry import RetryRefused, job_retry, job_retry_refusal
from governance.jobs.runs import WAITING_NOTE
from governance.jobs.schedules import schedules_state
from governance.models import AuditRecord, ErasureRequest, JobRun, PseudonymKey
from governance.staff.adminlog import NamelessAdminLog
from governance.staff.lists import DateRangeFilter, FullWidthList, cell_text, details_text, moment, short_id, words
from governance.staff.progress import progress_bar, progress_state, run_status_label
from memoryapp.models import Thread


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


def _url(name: str, pk: Any) -> str:
    try:
        return reverse(f"admin:{name}", args=[quote(pk)])
    except NoReverseMatch:
        return ""


# The permission that opens the page each kind of link leads to (an entry's link is to its thread's
# page). A link the viewer's role may not open is shown as plain text: never a way to a 403.
LINK_PERMISSIONS = {
    "agent": "memoryapp.view_agent",
    "agent_slug": "memoryapp.view_agent",
    "thread": "memoryapp.view_thread",
    "thread_pk": "memoryapp.view_thread",
    "entry": "memoryapp.view_thread",
    "item": "memoryapp.view_memoryitem",
    "key": "memoryapp.view_agentkey",
    "run": "governance.view_jobrun",
    "erasure": "governance.view_erasurerequest",
}


class ObjectLinks:
    """Admin links to the agents, threads, entries and items a page of rows names, found with one
    query per kind for the whole page; only to the pages `user` may open (every page without one)."""

    def __init__(self, user: Any = None) -> None:
        self.user = user
        self.agent_ids: set[int] = set()
        self.thread_pks: set[int] = set()
        self.threads: set[tuple[int, str]] = set()  # (agent id, external id)
        self.entries: set[str] = set()
        self.items: set[str] = set()
        self.key_prefixes: set[str] = set()
        self.agent_slugs: set[str] = set()
        self.runs: set[int] = set()
        self.erasures: set[int] = set()
        self.resolved: dict[tuple[str, Any], tuple[str, str]] = {}  # (kind, key) -> (label, url)

    def resolve(self) -> None:
        from memoryapp.models import Agent, AgentKey, Entry, MemoryItem, Thread

        if self.agent_ids or self.agent_slugs:
            for pk, slug in Agent.objects.filter(pk__in=self.agent_ids).values_list("pk", "slug"):
                self.resolved[("agent", pk)] = (slug, _url("memoryapp_agent_change", pk))
            for pk, slug in Agent.objects.filter(slug__in=self.agent_slugs).values_list("pk", "slug"):
                self.resolved[("agent_slug", slug)] = (slug, _url("memoryapp_agent_change", pk))
        if self.thread_pks:
            for pk, name in Thread.objects.filter(pk__in=self.thread_pks).values_list("pk", "external_id"):
                self.resolved[("thread_pk", pk)] = (name, _url("memoryapp_thread_change", pk))
        if self.threads:
            rows = Thread.objects.filter(
                agent_id__in={a for a, _ in self.threads}, external_id__in={n for _, n in self.threads}
            ).values_list("pk", "agent_id", "external_id")
            for pk, agent_id, name in rows:
                self.resolved[("thread", (agent_id, name))] = (name, _url("memoryapp_thread_change", pk))
        if self.entries:
            for entry_id, thread_pk in Entry.objects.filter(pk__in=self.entries).values_list("pk", "thread_id"):
                url = _url("memoryapp_thread_change", thread_pk)
                self.resolved[("entry", entry_id)] = (entry_id, f"{url}?entry={entry_id}#entry-{entry_id}")
        if self.items:
            for item_id in MemoryItem.objects.filter(pk__in=self.items).values_list("pk", flat=True):
                self.resolved[("item", item_id)] = (item_id, _url("memoryapp_memoryitem_change", item_id))
        if self.key_prefixes:
            for pk, prefix in AgentKey.objects.filter(prefix__in=self.key_prefixes).values_list("pk", "prefix"):
                self.resolved[("key", prefix)] = (prefix, _url("memoryapp_agentkey_change", pk))
        if self.erasures:
            for pk in ErasureRequest.objects.filter(pk__in=self.erasures).values_list("pk", flat=True):
                self.resolved[("erasure", pk)] = (
                    f"erasure request #{pk}",
                    _url("governance_erasurerequest_change", pk),
                )
        if self.runs:
            for pk in JobRun.objects.filter(pk__in=self.runs).values_list("pk", flat=True):
                self.resolved[("run", pk)] = (f"job run #{pk}", _url("governance_jobrun_change", pk))

    def may_open(self, kind: str) -> bool:
        return self.user is None or bool(self.user.has_perm(LINK_PERMISSIONS[kind]))

    def link(self, kind: str, key: Any, label: str | None = None, *, limit: int = 24) -> SafeString:
        """A link to the object (its whole name on hover), or its name when it is gone or when the
        viewer's role may not open its page."""
        found = self.resolved.get((kind, key))
        if found is not None and not self.may_open(kind):
            found = (found[0], "")
            text = str(label if label is not None else found[0])
            shown = short_id(text) if kind in ("entry", "item") else text
            shown = shown if len(shown) <= limit else shown[: limit - 1] + "…"
            return format_html('<span title="{}">{}</span>', text, shown)
        text = str(label if label is not None else found[0] if found else key)
        shown = short_id(text) if kind in ("entry", "item") else text
        shown = shown if len(shown) <= limit else shown[: limit - 1] + "…"
        if found is None or not found[1]:
            return format_html('<span class="gone" title="{}">{}</span>', text, shown)
        return format_html('<a href="{}" title="{}">{}</a>', found[1], text, shown)


# --- audit --------------------------------------------------------------------------------------------

# What an action's subject names: the object kind to link it to.
_SUBJECT_KINDS = (
    ("item.", "item"),
    ("entry.", "entry"),
    ("lineage.", "entry"),
    ("thread.rewind", "entry"),
    ("thread.compact", "entry"),
    ("thread.", "thread"),
    ("agent_key.", "key"),
    ("agent.", "agent_slug"),
    ("job.", "run"),
    ("erasure.", "erasure"),
)


def subject_kind(action: str) -> str | None:
    for prefix, kind in _SUBJECT_KINDS:
        if action.startswith(prefix):
            return kind
    return None


ERASED = "erased person"


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)


def _pseudonyms_shown(records: Iterable[AuditRecord]) -> None:
    """The page's records (read-only: never saved) with each pseudonym of a person or their thread
    shown as the id while the person's secret lives, `erased person` once it is gone
    (governance.audit.pseudonyms). One query for the secrets of the page's agents, one for the
    threads of those people."""
    records = list(records)
    found = {p for r in records for p in _strings([r.thread_id, r.subject, r.details]) if is_pseudonym(p)}
    if not found:
        return
    agent_ids = {r.agent_id for r in records}
    people = PseudonymKey.objects.filter(agent_id__in=agent_ids).values_list("agent_id", "user_id")
    threads = Thread.objects.filter(
        agent_id__in=[a for a in agent_ids if a is not None], user_id__in={u for _, u in people}
    ).values_list("agent_id", "external_id", "user_id")
    resolved = pseudonyms_resolve(pseudonyms=found, agent_ids=agent_ids, threads=threads)
    names = {p: resolved.get(p, ERASED) for p in found}
    for record in records:
        record.thread_id = pseudonymize(record.thread_id, names=names)
        record.subject = pseudonymize(record.subject, names=names)
        record.details = pseudonymize(record.details, names=names)


@admin.register(AuditRecord)
class AuditRecordAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    list_display = ("seq", "at_shown", "action", "actor_shown", "subject_link", "where", "outcome", "details_shown")
    list_display_links = ("seq",)
    list_filter = (("at", DateRangeFilter), "action")
    # Exact ids and prefixes of action names: the table grows without end, and these use its indexes.
    search_fields = ("^action", "=actor", "=subject", "=thread_id")
    search_help_text = "An action (its start, e.g. entry.), or an exact actor, subject or thread id."
    ordering = ("-seq",)  # newest first: what just happened is what staff come to check
    show_full_result_count = False
    change_list_template = "admin/governance/auditrecord/change_list.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        _pseudonyms_shown(changelist.result_list)
        links = ObjectLinks(request.user)
        for record in changelist.result_list:
            if record.agent_id is not None:
                links.agent_ids.add(record.agent_id)
                if record.thread_id:
                    links.threads.add((record.agent_id, record.thread_id))
            kind = subject_kind(record.action)
            if kind == "thread" and record.agent_id is not None:
                links.threads.add((record.agent_id, record.subject))
            elif kind == "entry":
                links.entries.add(record.subject)
            elif kind == "item":
                links.items.add(record.subject)
            elif kind == "key":
                links.key_prefixes.add(record.subject)
            elif kind == "agent_slug":
                links.agent_slugs.add(record.subject)
            elif kind == "run" and record.subject.isdigit():
                links.runs.add(int(record.subject))
            elif kind == "erasure" and record.subject.isdigit():
                links.erasures.add(int(record.subject))
        links.resolve()
        for record in changelist.result_list:
            record.links = links
        return changelist

    @admin.display(description="at", ordering="seq")
    def at_shown(self, obj: AuditRecord) -> SafeString:
        return moment(obj.at)

    @admin.display(description="actor", ordering="actor")
    def actor_shown(self, obj: AuditRecord) -> SafeString:
        return cell_text(obj.actor, 14)

    @admin.display(description="subject")
    def subject_link(self, obj: AuditRecord) -> SafeString:
        links: ObjectLinks | None = getattr(obj, "links", None)
        kind = subject_kind(obj.action)
        if links is None or kind is None:
            return cell_text(obj.subject, 24)
        key: Any = obj.subject
        if kind == "thread":
            key = (obj.agent_id, obj.subject)
        elif kind in ("run", "erasure"):
            key = int(obj.subject) if obj.subject.isdigit() else obj.subject
        return links.link(kind, key, obj.subject)

    @admin.display(description="agent / thread")
    def where(self, obj: AuditRecord) -> SafeString:
        """The agent and the thread the record is about, each a link."""
        links: ObjectLinks | None = getattr(obj, "links", None)
        if obj.agent_id is None or links is None:
            return cell_text(obj.thread_id, 24)
        agent = links.link("agent", obj.agent_id, limit=12)
        if not obj.thread_id:
            return agent
        return format_html(
            "{} / {}", agent, links.link("thread", (obj.agent_id, obj.thread_id), obj.thread_id, limit=14)
        )

    @admin.display(description="details")
    def details_shown(self, obj: AuditRecord) -> SafeString:
        """The details in words (`branches deleted 1 · entries deleted 120`), the stored JSON on hover."""
        if not obj.details:
            return format_html("{}", "")
        stored = json.dumps(obj.details, ensure_ascii=False, sort_keys=True)
        text = details_text(obj.details)
        shown = text if len(text) <= 160 else text[:159] + "…"
        return format_html('<span title="{}">{}</span>', stored[:2000], shown)

    def get_urls(self) -> list[Any]:
        return [
            path("verify/", self.admin_site.admin_view(self.verify_view), name="governance_auditrecord_verify"),
            *super().get_urls(),
        ]

    def verify_view(self, request: HttpRequest) -> HttpResponse:
        # admin_view only asks for staff: reading the whole chain is for those who may read the audit.
        if not self.has_view_permission(request):
            raise PermissionDenied
        result = audit_verify()
        if result.ok:
            messages.success(
                request,
                f"Audit chain verified: {result.records} records, unbroken; "
                f"{result.anchors} anchors outside the database agree.",
            )
        else:
            messages.error(
                request,
                f"Audit chain BROKEN at seq {result.first_broken}: {result.reason} "
                f"({result.records} records checked, {result.anchors} anchors).",
            )
        return HttpResponseRedirect(reverse("admin:governance_auditrecord_changelist"))


# --- job runs -----------------------------------------------------------------------------------------

# Keys of job arguments and results that name objects, and what they name.
_ID_KEYS = {
    "thread_pk": "thread_pk",
    "thread_id": "thread",
    "agent_id": "agent",
    "compaction_entry_id": "entry",
    "first_kept_entry_id": "entry",
    "entry_id": "entry",
    "entry_ids": "entry",
    "item_id": "item",
    "item_ids": "item",
    "purged_item_ids": "item",
}


def _named(run: JobRun) -> Iterable[tuple[str, Any]]:
    """(kind, key) of every object the run's arguments and result name."""
    for values in (run.arguments or {}, run.result or {}):
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            kind = _ID_KEYS.get(key)
            for one in value if isinstance(value, list) else [value]:
                if kind == "thread" and isinstance(one, str) and run.agent_id is not None:
                    yield kind, (run.agent_id, one)
                elif (kind in ("thread_pk", "agent") and isinstance(one, int)) or (
                    kind in ("entry", "item") and isinstance(one, str)
                ):
                    yield kind, one
    if run.agent_id is not None:
        yield "agent", run.agent_id


def _collect(runs: Iterable[JobRun], user: Any = None) -> ObjectLinks:
    links = ObjectLinks(user)
    sets = {
        "thread_pk": links.thread_pks,
        "thread": links.threads,
        "agent": links.agent_ids,
        "entry": links.entries,
        "item": links.items,
    }
    for run in runs:
        for kind, key in _named(run):
            sets[kind].add(key)  # type: ignore[attr-defined]
    links.resolve()
    return links


def readable(values: Any, run: JobRun, links: ObjectLinks) -> SafeString:
    """A run's arguments or result as a table of names and values, ids as links to their pages."""
    if not values:
        return mark_safe("—")
    if not isinstance(values, dict):
        return format_html("<pre>{}</pre>", json.dumps(values, ensure_ascii=False, indent=2))

    def shown(key: str, value: Any) -> SafeString:
        kind = _ID_KEYS.get(key)
        if kind and isinstance(value, list):
            return format_html_join(", ", "{}", ((shown(key, one),) for one in value[:50]))
        if kind == "thread" and isinstance(value, str) and run.agent_id is not None:
            return links.link("thread", (run.agent_id, value), value)
        if kind in ("thread_pk", "agent") and isinstance(value, int):
            # A job names its thread by row id only (issue 25 §5): shown by the thread's name while
            # it lives, by its number once it is gone.
            gone = kind == "thread_pk" and (kind, value) not in links.resolved
            return links.link(kind, value, f"#{value}" if gone else None)
        if kind in ("entry", "item") and isinstance(value, str):
            return links.link(kind, value, value)
        if isinstance(value, dict):
            return format_html("{}", details_text(value) or "—")
        if isinstance(value, list):
            if all(isinstance(one, str | int | float) for one in value):
                return format_html("{}", ", ".join(str(one) for one in value[:50]) + (" …" if len(value) > 50 else ""))
            return format_html("{} entries", len(value))
        if isinstance(value, bool):
            return format_html("{}", "yes" if value else "no")
        return format_html("{}", value)

    rows = format_html_join(
        "",
        '<tr><th title="{}">{}</th><td>{}</td></tr>',
        ((key, words(key), shown(key, v)) for key, v in values.items()),
    )
    return format_html('<table class="jr-fields"><tbody>{}</tbody></table>', rows)


class NotTakenFilter(admin.SimpleListFilter):
    """Queued runs the broker took that no worker started (the job sweep's note in their error)."""

    title = "taken by a worker"
    parameter_name = "not_taken"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "not taken by any worker")]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value() == "yes":
            return queryset.filter(status=JobRun.Status.QUEUED, error__startswith=WAITING_NOTE)
        return queryset


@admin.register(JobRun)
class JobRunAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    list_display = ("id", "run", "status_shown", "progress_shown", "agent_shown", "created", "took", "error_short")
    list_display_links = ("id",)
    list_filter = ("status", "kind", NotTakenFilter, ("created_at", DateRangeFilter))
    search_fields = ("=kind", "=dedupe_key")
    show_full_result_count = False
    actions = ["retry_runs"]
    change_form_template = "admin/governance/jobrun/change_form.html"
    change_list_template = "admin/governance/jobrun/change_list.html"
    fields = (
        "kind",
        "status_shown",
        "progress_shown",
        "agent_shown",
        "arguments_shown",
        "result_shown",
        "error_shown",
        "attempts",
        "usage_shown",
        "task_name",
        "dedupe_key",
        "created_at",
        "sent_at",
        "started_at",
        "finished_at",
        "duration",
    )
    readonly_fields = fields

    # Job runs are written by the jobs only: staff read them and may send a failed one again.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm("governance.change_jobrun"))

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        links = _collect(changelist.result_list, request.user)
        for run in changelist.result_list:
            run.links = links
        return changelist

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        # The run's page links only to what the viewer may open (its fields are read without the request).
        run = super().get_object(request, object_id, from_field)
        if run is not None:
            run.links = _collect([run], request.user)
        return run

    def _links(self, run: JobRun) -> ObjectLinks:
        links: ObjectLinks | None = getattr(run, "links", None)
        if links is None:
            links = run.links = _collect([run])  # type: ignore[attr-defined]
        return links

    @admin.display(description="progress")
    def progress_shown(self, obj: JobRun) -> SafeString:
        return progress_bar(obj)

    @admin.display(description="status", ordering="status")
    def status_shown(self, obj: JobRun) -> SafeString:
        label = run_status_label(obj)
        return format_html('<span class="jr-status jr-{}">{}</span>', obj.status, label)

    @admin.display(description="error")
    def error_short(self, obj: JobRun) -> SafeString:
        """The error's last line (a traceback ends with what went wrong), cut; all of it on the run's page."""
        lines = [line for line in (obj.error or "").strip().splitlines() if line.strip()]
        return cell_text(lines[-1] if lines else "", 90) if lines else format_html("{}", "")

    @admin.display(description="agent")
    def agent_shown(self, obj: JobRun) -> SafeString:
        return self._links(obj).link("agent", obj.agent_id) if obj.agent_id is not None else mark_safe("—")

    @admin.display(description="run", ordering="kind")
    def run(self, obj: JobRun) -> SafeString:
        """Its kind (a link to it) and what it is about, beneath."""
        url = _url("governance_jobrun_change", obj.pk)
        about = self.about(obj)
        return format_html(
            '<a href="{}">{}</a>{}',
            url,
            obj.kind,
            format_html('<br><span class="jr-about">{}</span>', about) if about else "",
        )

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: JobRun) -> SafeString:
        return moment(obj.created_at)

    @admin.display(description="took")
    def took(self, obj: JobRun) -> SafeString:
        usage = self.usage_shown(obj)
        return format_html(
            "{}{}", self.duration(obj), format_html('<br><span class="jr-about">{}</span>', usage) if usage else ""
        )

    @admin.display(description="about")
    def about(self, obj: JobRun) -> SafeString:
        arguments = obj.arguments or {}
        links = self._links(obj)
        if isinstance(arguments.get("thread_id"), str) and obj.agent_id is not None:
            return format_html("thread {}", links.link("thread", (obj.agent_id, arguments["thread_id"])))
        if isinstance(arguments.get("thread_pk"), int):
            return format_html("thread {}", links.link("thread_pk", arguments["thread_pk"]))
        return mark_safe("")

    @admin.display(description="arguments")
    def arguments_shown(self, obj: JobRun) -> SafeString:
        return readable(obj.arguments, obj, self._links(obj))

    @admin.display(description="result")
    def result_shown(self, obj: JobRun) -> SafeString:
        return readable(obj.result, obj, self._links(obj))

    @admin.display(description="error")
    def error_shown(self, obj: JobRun) -> SafeString:
        return format_html('<pre class="jr-error">{}</pre>', obj.error) if obj.error else mark_safe("—")

    @admin.display(description="model")
    def usage_shown(self, obj: JobRun) -> str:
        usage = obj.usage or {}
        if not usage:
            return ""
        text = f"{usage.get('calls', 0)} calls · {usage.get('input_tokens', 0)}/{usage.get('output_tokens', 0)} tok"
        return text + (f" · ${usage['cost_usd']:.4f}" if usage.get("cost_usd") else "")

    @admin.display(description="took")
    def duration(self, obj: JobRun) -> str:
        if obj.started_at and obj.finished_at:
            return f"{(obj.finished_at - obj.started_at).total_seconds():.1f}s"
        if obj.started_at and obj.status == JobRun.Status.RUNNING:
            return f"{(timezone.now() - obj.started_at).total_seconds():.0f}s so far"
        return ""

    # --- retry, and the progress the pages poll ------------------------------------------------------

    def _retry(self, request: HttpRequest, runs: Iterable[JobRun]) -> None:
        sent, refused = [], []
        for run in runs:
            try:
                job_retry(run=run, actor=_actor(request))
                sent.append(run.pk)
            except RetryRefused as exc:
                refused.append(str(exc))
        if sent:
            messages.success(request, f"Sent again: job run {', '.join(f'#{pk}' for pk in sent)}.")
        for reason in refused:
            messages.warning(request, reason)

    @admin.action(description="Retry the selected failed runs", permissions=["retry"])
    def retry_runs(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> None:
        self._retry(request, queryset.order_by("pk"))

    def get_urls(self) -> list[Any]:
        return [
            path("progress/", self.admin_site.admin_view(self.progress_view), name="governance_jobrun_progress"),
            path("schedules/", self.admin_site.admin_view(self.schedules_view), name="governance_jobrun_schedules"),
            path("<int:pk>/retry/", self.admin_site.admin_view(self.retry_view), name="governance_jobrun_retry"),
            *super().get_urls(),
        ]

    def retry_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not self.has_retry_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        run = JobRun.objects.filter(pk=pk).first()
        if run is None:
            raise PermissionDenied
        self._retry(request, [run])
        return HttpResponseRedirect(reverse("admin:governance_jobrun_change", args=[pk]))

    def schedules_view(self, request: HttpRequest) -> HttpResponse:
        """Every beat schedule: its interval (edited under Periodic tasks), when it runs next, and the
        outcome of the last job run it sent (governance.jobs.schedules)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            edit_base = reverse("admin:django_celery_beat_periodictask_changelist")
        except NoReverseMatch:
            edit_base = ""
        may_edit = request.user.has_perm("django_celery_beat.change_periodictask")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Schedules",
            "is_nav_sidebar_enabled": False,  # nine columns, the task's dotted path among them
            "schedules": schedules_state(),
            "edit_base": edit_base if may_edit else "",
            "audit": audit_verification_latest(),
        }
        return TemplateResponse(request, "admin/governance/jobrun/schedules.html", context)

    def progress_view(self, request: HttpRequest) -> JsonResponse:
        """The progress of the runs a page shows (`?ids=1,2,3`, at most 200): what its script polls."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        ids = [int(part) for part in request.GET.get("ids", "").split(",") if part.strip().isdigit()][:200]
        runs = JobRun.objects.filter(pk__in=ids).only(
            "id", "kind", "agent_id", "status", "result", "progress_done", "progress_total", "started_at", "finished_at"
        )
        return JsonResponse({"runs": [progress_state(run) for run in runs]})

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        run = JobRun.objects.filter(pk=object_id).only("status", "task_name").first() if object_id.isdigit() else None
        refusal = job_retry_refusal(run=run) if run is not None and run.status == JobRun.Status.FAILED else ""
        context = {
            **(extra_context or {}),
            # Offered only where job_retry would send it again: a failed run of a task.
            "may_retry": run is not None
            and not refusal
            and self.has_retry_permission(request)
            and run.status == JobRun.Status.FAILED,
            "retry_refusal": refusal if self.has_retry_permission(request) else "",
        }
        return super().change_view(request, object_id, form_url, extra_context=context)
