"""A person's page: everything memory holds about one person id, across agents, by kind (threads,
entries, their messages in others' threads, items, facts, entities, file versions), with the legal
holds and the erasure and export requests naming them; each count a link to its list filtered to
the person, and Erase / Export buttons that open the request forms filled in.

Found by one search box (this page's, and the start page's), matching the id exactly as an erasure
does: the counts are the erasure's own selectors (`person_holdings`), so what the page shows is
what an erasure of the person takes. Each role sees only the kinds its permissions open; an
operator, who reads no conversation, sees none.

The identifiers each agent registered for the person (memoryapp.screening.identifiers: e-mails,
phones, names, external ids) are listed per agent: counted by kind for any staff, their values
opened (they are sealed under the person's key) only for staff with `view_personidentifier` (the
privacy officers), and edited only by those with `change_personidentifier`: one form per agent,
saved through the service the agent API's PUT uses (normalised, audited with counts, the subject
index rebuilt by its job), never written to Django's admin log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse

from governance.erasure.admin import marks_shown
from governance.models import ErasureRequest, ExportRequest
from memoryapp.admin.person_links import export_person_url
from memoryapp.admin.threads import erase_person_url
from memoryapp.errors import DomainError
from memoryapp.forgetting.person import HOLDING_KINDS, person_holdings
from memoryapp.items.selectors import FACT_PREFIX
from memoryapp.models import Agent, LegalHold, PersonIdentifier
from memoryapp.screening.identifiers import LISTS, identifiers_by_agent, identifiers_set
from memoryapp.subjects.index import subject_index_schedule

# Who reads the registered identifiers' values, and who edits them (the privacy officers).
IDENTIFIERS_VIEW = "memoryapp.view_personidentifier"
IDENTIFIERS_CHANGE = "memoryapp.change_personidentifier"
IDENTIFIER_LABELS = {"emails": "e-mails", "phones": "phones", "names": "names", "external_ids": "external ids"}

# Per kind: its label, the permission that shows it, and the list it links to (with the filters
# that narrow the list to the agent and the person; None: a count without a list of its own).
KINDS: dict[str, tuple[str, str, str | None]] = {
    "threads": ("threads", "memoryapp.view_thread", "memoryapp_thread_changelist"),
    "entries": ("entries in them", "memoryapp.view_entry", None),
    "messages_elsewhere": ("their messages in others' threads", "memoryapp.view_entry", None),
    "items": ("memory items", "memoryapp.view_memoryitem", "memoryapp_memoryitem_changelist"),
    "facts": ("facts", "memoryapp.view_memoryitem", "memoryapp_memoryitem_changelist"),
    "entities": ("entities", "memoryapp.view_entity", "memoryapp_entity_changelist"),
    "file_versions": (
        "memory file versions",
        "memoryapp.view_memoryfileversion",
        "memoryapp_memoryfileversion_changelist",
    ),
}
assert tuple(KINDS) == HOLDING_KINDS


@dataclass(frozen=True)
class Cell:
    count: int
    url: str


@dataclass(frozen=True)
class AgentRow:
    slug: str
    url: str
    cells: list[Cell]


def person_url(user_id: str) -> str:
    """The person's page (for any staff: each sees what their role opens)."""
    return reverse("admin-person") + "?" + urlencode({"id": user_id})


def _list_url(name: str, query: dict[str, Any]) -> str:
    try:
        return reverse(f"admin:{name}") + "?" + urlencode(query)
    except NoReverseMatch:
        return ""


def _cell_url(kind: str, *, agent_id: int, user_id: str) -> str:
    name = KINDS[kind][2]
    if name is None:
        return ""
    if kind in ("items", "facts"):
        query: dict[str, Any] = {"agent__id__exact": agent_id, "user_id": user_id}  # the items' person filter
        if kind == "facts":
            query["attribute__startswith"] = FACT_PREFIX
        return _list_url(name, query)
    return _list_url(name, {"agent__id__exact": agent_id, "user_id__exact": user_id})


def person_view(request: HttpRequest) -> HttpResponse:
    user = request.user
    if request.method == "POST":
        return _identifiers_save(request)
    user_id = request.GET.get("id", "").strip()
    shown = [kind for kind in HOLDING_KINDS if user.has_perm(KINDS[kind][1])]
    context: dict[str, Any] = {
        **admin.site.each_context(request),
        "title": f"Person {user_id}" if user_id else "Find a person",
        "user_id": user_id,
        "kinds": [KINDS[kind][0] for kind in shown],
        "sees_nothing": not shown,
        "is_nav_sidebar_enabled": False,
    }
    if user_id and len(user_id) > 128:
        context["error"] = "A person's id is at most 128 characters."
        user_id = ""
    if user_id and shown:
        holdings = person_holdings(user_id=user_id)
        agents = dict(Agent.objects.filter(pk__in=holdings).values_list("pk", "slug"))
        may_open_agents = user.has_perm("memoryapp.view_agent")
        rows = []
        for agent_id, counts in sorted(holdings.items(), key=lambda pair: agents.get(pair[0], "")):
            if not any(counts[kind] for kind in shown):
                continue
            cells = [
                Cell(counts[kind], _cell_url(kind, agent_id=agent_id, user_id=user_id) if counts[kind] else "")
                for kind in shown
            ]
            url = reverse("admin:memoryapp_agent_change", args=[agent_id]) if may_open_agents else ""
            rows.append(AgentRow(slug=agents.get(agent_id, f"#{agent_id}"), url=url, cells=cells))
        context["rows"] = rows
        context["totals"] = [sum(row.cells[n].count for row in rows) for n in range(len(shown))]
    if user.has_perm("governance.view_erasurerequest"):
        # Who is being erased: this person, or (the people page) everyone, the interrupted ones
        # among them (a mark no process works on keeps redacting writes naming them).
        context["marks"] = marks_shown(user_id=user_id or None)
        context["marks_with_person"] = not user_id
    if user_id and not context.get("error"):
        context.update(_identifiers(request, user_id))
    if user_id:
        context.update(_governance(request, user_id))
        context["found_nothing"] = not context.get("rows") and not any(
            context.get(name) for name in ("holds", "erasures", "exports", "identifiers")
        )
    return TemplateResponse(request, "admin/memoryapp/person.html", context)


def _governance(request: HttpRequest, user_id: str) -> dict[str, Any]:
    """The holds and requests naming the person, and the request forms filled in, for the roles
    that may see and file them."""
    user = request.user
    found: dict[str, Any] = {}
    if user.has_perm("memoryapp.view_legalhold"):
        holds = LegalHold.objects.filter(user_id=user_id).select_related("agent").order_by("-placed_at")
        found["holds"] = [
            {
                "hold": hold,
                "url": reverse("admin:memoryapp_legalhold_change", args=[hold.pk]),
                "where": hold.agent.slug if hold.agent else "every agent",
            }
            for hold in holds[:50]
        ]
    if user.has_perm("governance.view_erasurerequest"):
        erasures = ErasureRequest.objects.filter(user_id=user_id).order_by("-created_at")[:50]
        found["erasures"] = [
            (request_, reverse("admin:governance_erasurerequest_change", args=[request_.pk])) for request_ in erasures
        ]
    if user.has_perm("governance.view_exportrequest"):
        exports = ExportRequest.objects.filter(user_id=user_id).order_by("-created_at")[:50]
        found["exports"] = [
            (request_, reverse("admin:governance_exportrequest_change", args=[request_.pk])) for request_ in exports
        ]
    found["erase_url"] = erase_person_url(request, user_id)
    found["export_url"] = export_person_url(request, user_id=user_id, agent_id=None)
    return found


# Lines a list's box shows before it scrolls (one value a line, never wrapped).
IDENTIFIER_ROWS = (3, 12)


@dataclass(frozen=True)
class IdentifierList:
    name: str
    label: str
    values: list[str]

    @property
    def rows(self) -> int:
        least, most = IDENTIFIER_ROWS
        return max(least, min(most, len(self.values) + 1))


@dataclass(frozen=True)
class IdentifiersRow:
    agent_id: int
    slug: str
    # (label, how many) of each list.
    counts: list[tuple[str, int]]
    # Each list with its values; None: the staff member may not read them.
    lists: list[IdentifierList] | None
    # Its values shown unfolded: the only agent, or the one just saved.
    unfolded: bool = False


def _identifiers(request: HttpRequest, user_id: str) -> dict[str, Any]:
    """The identifiers registered for the person, per agent (see the module's docstring): counted
    in one query, opened (for those who may read them) in one more, however many agents."""
    user = request.user
    may_read, may_change = user.has_perm(IDENTIFIERS_VIEW), user.has_perm(IDENTIFIERS_CHANGE)
    names = {str(kind): name for name, kind in LISTS.items()}
    counted: dict[int, dict[str, int]] = {}
    for agent_id, kind, n in (
        PersonIdentifier.objects.filter(user_id=user_id, given=False)
        .values("agent_id", "kind")
        .annotate(n=Count("id"))
        .values_list("agent_id", "kind", "n")
    ):
        counted.setdefault(agent_id, dict.fromkeys(LISTS, 0))[names[kind]] = n
    agents = dict(Agent.objects.filter(pk__in=counted).values_list("pk", "slug"))
    # Opened under the person's data key: for the privacy officers only.
    opened = identifiers_by_agent(user_id=user_id, agent_ids=list(counted)) if may_read or may_change else {}
    saved = request.GET.get("agent", "")
    rows = []
    for agent_id, counts in sorted(counted.items(), key=lambda pair: agents.get(pair[0], "")):
        lists = None
        if may_read or may_change:
            values = opened.get(agent_id, {})
            lists = [IdentifierList(name, IDENTIFIER_LABELS[name], values.get(name, [])) for name in LISTS]
        rows.append(
            IdentifiersRow(
                agent_id=agent_id,
                slug=agents.get(agent_id, f"#{agent_id}"),
                counts=[(IDENTIFIER_LABELS[name], counts[name]) for name in LISTS],
                lists=lists,
                unfolded=len(counted) == 1 or saved == str(agent_id),
            )
        )
    found: dict[str, Any] = {
        "identifiers": rows,
        "identifier_totals": [(IDENTIFIER_LABELS[name], sum(c[name] for c in counted.values())) for name in LISTS],
        "identifier_labels": list(IDENTIFIER_LABELS.items()),
        "identifiers_readable": may_read or may_change,
        "identifiers_editable": may_change,
    }
    if may_change:
        found["identifier_agents"] = list(
            Agent.objects.exclude(pk__in=counted).order_by("slug").values_list("pk", "slug")[:500]
        )
    return found


def _identifiers_save(request: HttpRequest) -> HttpResponse:
    """Replace the person's identifiers in one agent (the form of that agent's row, or the form for
    an agent that has none yet), as the agent API's PUT does; back to the page, saying what changed
    in counts only (the values stay out of messages and logs)."""
    user_id = request.POST.get("user_id", "").strip()
    back = person_url(user_id) + "#person-identifiers"
    if not request.user.has_perm(IDENTIFIERS_CHANGE):
        messages.error(request, "Your role may not change a person's identifiers: ask a privacy officer.")
        return HttpResponseRedirect(back)
    chosen = request.POST.get("agent", "")
    agent = Agent.objects.filter(pk=int(chosen)).first() if chosen.isdigit() else None
    if agent is None or not user_id or len(user_id) > 128:
        messages.error(request, "Choose an agent and a person to register identifiers for.")
        return HttpResponseRedirect(back)
    body = {name: [line.strip() for line in request.POST.get(name, "").splitlines() if line.strip()] for name in LISTS}
    try:
        with transaction.atomic():
            saved = identifiers_set(
                agent=agent, user_id=user_id, body=body, actor=f"staff:{request.user.get_username()}"
            )
            subject_index_schedule(agent_id=agent.pk, user_id=user_id)
    except DomainError as exc:
        messages.error(request, f"Nothing was saved for {agent.slug}: {exc.field}: {exc.message}")
        return HttpResponseRedirect(back)
    counts = ", ".join(f"{len(saved[name])} {IDENTIFIER_LABELS[name]}" for name in LISTS)
    messages.success(request, f"Identifiers saved for {agent.slug}: {counts}.")
    # Back with the agent just saved unfolded (the others stay folded).
    return HttpResponseRedirect(person_url(user_id) + "&" + urlencode({"agent": agent.pk}) + "#person-identifiers")
