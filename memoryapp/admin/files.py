"""Admin pages of memory files: the files of each scope as a tree, each file's history and diffs, redaction."""

from __future__ import annotations

import difflib
from collections import defaultdict
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from governance.staff.adminlog import NamelessAdminLog
from governance.staff.lists import presence_filter
from memoryapp.files.access import FileAccess
from memoryapp.files.services import files_redact
from memoryapp.models import Agent, MemoryFileVersion

# The tree page reads heads only; past this many it asks to pick one agent.
TREE_LIMIT = 5000
ADMIN_REDACTION_REASON = "redacted by staff in the admin"


def _actor(request: HttpRequest) -> str:
    return f"staff:{request.user.get_username()}"


def scope_label(user_id: str, project_id: str, thread_id: str) -> str:
    limits = [
        f"{name} {value}"
        for name, value in zip(("user", "project", "thread"), (user_id, project_id, thread_id), strict=True)
        if value
    ]
    return " / ".join(limits) or "agent-wide"


def history_url(version: MemoryFileVersion) -> str:
    query = urlencode(
        {
            "agent": str(version.agent_id),
            "user_id": version.user_id,
            "project_id": version.project_id,
            "thread_id": version.thread_id,
            "path": version.path,
        }
    )
    return reverse("admin:memoryapp_memoryfileversion_history") + "?" + query


def diff_lines(older: MemoryFileVersion, newer: MemoryFileVersion) -> list[tuple[str, str]]:
    """A unified diff of two versions as (css class, line); the template escapes the text."""
    diff = difflib.unified_diff(
        (older.content or "").splitlines(),
        (newer.content or "").splitlines(),
        fromfile=f"{older.path} @ {older.sequence}" + (" (deleted)" if older.content is None else ""),
        tofile=f"{newer.path} @ {newer.sequence}" + (" (deleted)" if newer.content is None else ""),
        lineterm="",
    )
    lines: list[tuple[str, str]] = []
    for line in diff:
        if line.startswith(("+++", "---")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "added"
        elif line.startswith("-"):
            kind = "removed"
        else:
            kind = "same"
        lines.append((kind, line))
    return lines


@admin.register(MemoryFileVersion)
class MemoryFileVersionAdmin(NamelessAdminLog, admin.ModelAdmin):
    list_display = ("path", "sequence", "agent", "scope", "author", "size", "state", "place", "created_at", "history")
    list_filter = ("author", ("redacted_at", presence_filter("redacted", empty="words kept", present="redacted")))
    list_select_related = ("agent",)
    search_fields = ("path", "user_id", "project_id", "thread_id", "agent__slug")
    raw_id_fields = ("agent", "previous", "place")
    show_full_result_count = False
    ordering = ("-created_at",)
    actions = ["redact"]
    change_list_template = "admin/memoryapp/memoryfileversion/change_list.html"
    exclude = ("content",)
    readonly_fields = (
        "agent",
        "user_id",
        "project_id",
        "thread_id",
        "path",
        "sequence",
        "sha256",
        "size",
        "previous",
        "place",
        "renamed_from",
        "author",
        "created_at",
        "redacted_at",
        "redaction_reason",
        "content_shown",
        "history",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryFileVersion]:
        return super().get_queryset(request).defer("content")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # versions are written by the memory tool and the services, never by hand

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # history stays whole: redact instead

    @admin.display(description="scope")
    def scope(self, obj: MemoryFileVersion) -> str:
        return scope_label(obj.user_id, obj.project_id, obj.thread_id)

    @admin.display(description="state")
    def state(self, obj: MemoryFileVersion) -> str:
        if obj.redacted_at:
            return "redacted"
        if obj.renamed_from:
            return f"moved from {obj.renamed_from}"
        return "deleted" if obj.sha256 == "" else "written"

    @admin.display(description="history")
    def history(self, obj: MemoryFileVersion) -> str:
        return format_html('<a href="{}">history</a>', history_url(obj))

    @admin.display(description="content")
    def content_shown(self, obj: MemoryFileVersion) -> str:
        content = MemoryFileVersion.objects.values_list("content", flat=True).get(pk=obj.pk)
        if content is None:
            return "(deleted)"
        return format_html('<pre style="white-space:pre-wrap">{}</pre>', content)

    def has_redact_permission(self, request: HttpRequest) -> bool:
        # The admin never deletes a version (history stays whole), but redaction is for those who may.
        return bool(request.user.has_perm("memoryapp.delete_memoryfileversion"))

    @admin.action(
        description="Redact the selected files in their scope (every version, along renames)", permissions=["redact"]
    )
    def redact(self, request: HttpRequest, queryset: QuerySet[MemoryFileVersion]) -> None:
        by_scope: dict[tuple[int, str, str, str], set[str]] = defaultdict(set)
        for agent_id, user_id, project_id, thread_id, file_path in queryset.values_list(
            "agent_id", "user_id", "project_id", "thread_id", "path"
        ):
            by_scope[(agent_id, user_id, project_id, thread_id)].add(file_path)
        agents = Agent.objects.in_bulk({key[0] for key in by_scope})
        redacted = 0
        for (agent_id, user_id, project_id, thread_id), paths in by_scope.items():
            access = FileAccess(
                agent=agents[agent_id],
                user_id=user_id,
                project_id=project_id,
                thread_id=thread_id,
                actor=_actor(request),
            )
            report = files_redact(access=access, paths=sorted(paths), reason=ADMIN_REDACTION_REASON, exact_scope=True)
            redacted += report.versions
        messages.success(
            request, f"Redacted {redacted} version(s) of {sum(len(p) for p in by_scope.values())} file(s)."
        )

    # --- pages: tree, history, diff --------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        return [
            path("tree/", self.admin_site.admin_view(self.tree_view), name="memoryapp_memoryfileversion_tree"),
            path(
                "history/",
                self.admin_site.admin_view(self.file_history_view),
                name="memoryapp_memoryfileversion_history",
            ),
            path("diff/", self.admin_site.admin_view(self.diff_view), name="memoryapp_memoryfileversion_diff"),
            *super().get_urls(),
        ]

    def _page(self, request: HttpRequest, template: str, title: str, **context: Any) -> TemplateResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return TemplateResponse(
            request,
            f"admin/memoryapp/memoryfileversion/{template}",
            {**self.admin_site.each_context(request), "opts": self.model._meta, "title": title, **context},
        )

    def tree_view(self, request: HttpRequest) -> TemplateResponse:
        """The files that stand, per agent and scope, laid out as a tree of paths."""
        heads = MemoryFileVersion.objects.defer("content").select_related("agent")
        chosen = request.GET.get("agent", "")
        if chosen:
            heads = heads.filter(agent__slug=chosen)
        heads = heads.order_by("agent_id", "user_id", "project_id", "thread_id", "path", "-sequence").distinct(
            "agent_id", "user_id", "project_id", "thread_id", "path"
        )
        rows = list(heads[: TREE_LIMIT + 1])
        truncated = len(rows) > TREE_LIMIT
        tree: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for head in rows[:TREE_LIMIT]:
            if head.sha256 == "":
                continue  # deleted: no longer stands (its history stays reachable from the list)
            lines = tree[head.agent.slug][scope_label(head.user_id, head.project_id, head.thread_id)]
            shown = {line["path"] for line in lines}
            parts = head.path.split("/")
            for depth in range(2, len(parts) - 1):
                directory = "/".join(parts[: depth + 1])
                if directory not in shown:
                    lines.append({"path": directory, "name": parts[depth] + "/", "depth": depth - 1, "file": None})
                    shown.add(directory)
            lines.append(
                {"path": head.path, "name": parts[-1], "depth": len(parts) - 2, "file": head, "url": history_url(head)}
            )
        return self._page(
            request,
            "tree.html",
            "Memory files",
            tree={agent: dict(scopes) for agent, scopes in sorted(tree.items())},
            agents=Agent.objects.order_by("slug").values_list("slug", flat=True),
            chosen=chosen,
            truncated=truncated,
        )

    def file_history_view(self, request: HttpRequest) -> TemplateResponse:
        """Every version of one file in one scope, oldest first, with who wrote it and where."""
        params = request.GET
        if not params.get("agent", "").isdigit() or not params.get("path"):
            raise Http404("Name an agent and a path.")
        versions = list(
            MemoryFileVersion.objects.filter(
                agent_id=int(params["agent"]),
                user_id=params.get("user_id", ""),
                project_id=params.get("project_id", ""),
                thread_id=params.get("thread_id", ""),
                path=params["path"],
            )
            .defer("content")
            .select_related("agent", "place")
            .order_by("sequence")
        )
        if not versions:
            raise Http404("No such file.")
        first = versions[0]
        return self._page(
            request,
            "history.html",
            f"History of {first.path}",
            versions=versions,
            file_path=first.path,
            agent=first.agent,
            scope=scope_label(first.user_id, first.project_id, first.thread_id),
            diff_url=reverse("admin:memoryapp_memoryfileversion_diff"),
        )

    def diff_view(self, request: HttpRequest) -> TemplateResponse:
        """The difference between two versions (any two: across renames too)."""
        ids = [request.GET.get("a", ""), request.GET.get("b", "")]
        found = MemoryFileVersion.objects.in_bulk(ids)
        if len(found) != len(set(ids)) or not all(ids):
            raise Http404("Pick two versions.")
        older, newer = sorted((found[ids[0]], found[ids[1]]), key=lambda v: (v.created_at, v.sequence))
        if older.agent_id != newer.agent_id:
            raise Http404("The versions belong to different agents.")
        return self._page(
            request,
            "diff.html",
            f"{older.path} @ {older.sequence} → {newer.path} @ {newer.sequence}",
            older=older,
            newer=newer,
            lines=diff_lines(older, newer),
            back=history_url(newer),
        )
