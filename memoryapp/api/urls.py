"""The agent API under /api/v1/ (no trailing slash): every route, grouped by area.

The order matters where two routes could take one path: `threads/import` comes before
`threads/<id>` so that a thread named "import" is still reachable by GET.
"""

from django.urls import URLPattern, path

from memoryapp.api import (
    compaction,
    context_documents,
    events,
    files,
    items,
    knowledge,
    purposes,
    runs,
    screening,
    search,
    sessions,
    threads,
    users,
)
from memoryapp.api.views_root import ApiRootView

urlpatterns: list[URLPattern] = [
    path("", ApiRootView.as_view(), name="api-root"),
    # Threads and entries, and busy threads' runs.
    path("threads", threads.ThreadsView.as_view(), name="threads"),
    path("threads/import", threads.ThreadImportView.as_view(), name="thread-import"),
    path("threads/<str:thread_id>", threads.ThreadView.as_view(), name="thread"),
    path("threads/<str:thread_id>/entries", threads.ThreadEntriesView.as_view(), name="thread-entries"),
    path("threads/<str:thread_id>/path", threads.ThreadPathView.as_view(), name="thread-path"),
    path("threads/<str:thread_id>/rewind", threads.ThreadRewindView.as_view(), name="thread-rewind"),
    path("threads/<str:thread_id>/checkout", threads.ThreadCheckoutView.as_view(), name="thread-checkout"),
    path("threads/<str:thread_id>/fork", threads.ThreadForkView.as_view(), name="thread-fork"),
    path("threads/<str:thread_id>/runs", runs.ThreadRunsView.as_view(), name="thread-runs"),
    path("threads/<str:thread_id>/runs/<str:run_id>", runs.ThreadRunView.as_view(), name="thread-run"),
    path(
        "threads/<str:thread_id>/runs/<str:run_id>/finish", runs.ThreadRunFinishView.as_view(), name="thread-run-finish"
    ),
    path(
        "threads/<str:thread_id>/runs/<str:run_id>/events", runs.ThreadRunEventsView.as_view(), name="thread-run-events"
    ),
    path(
        "threads/<str:thread_id>/runs/<str:run_id>/snapshot",
        runs.ThreadRunSnapshotView.as_view(),
        name="thread-run-snapshot",
    ),
    path("threads/<str:thread_id>/export", threads.ThreadExportView.as_view(), name="thread-export"),
    # Channel sessions: a channel conversation mapped onto one thread.
    path("sessions", sessions.SessionsView.as_view(), name="sessions"),
    path("sessions/<str:session_id>", sessions.SessionView.as_view(), name="session"),
    path("sessions/<str:session_id>/close", sessions.SessionCloseView.as_view(), name="session-close"),
    path("sessions/<str:session_id>/reopen", sessions.SessionReopenView.as_view(), name="session-reopen"),
    path("entries/<str:entry_id>", threads.EntryView.as_view(), name="entry"),
    path("entries/<str:entry_id>/redact", threads.EntryRedactView.as_view(), name="entry-redact"),
    # Recall.
    path("search", search.SearchView.as_view(), name="search"),
    path("threads/<str:thread_id>/context", search.ContextView.as_view(), name="thread-context"),
    # Memory items, facts and the model's memory tools. A namespace holds slashes: FactsView splits the path.
    path("items", items.ItemsView.as_view(), name="items"),
    path("items/<str:item_id>", items.ItemView.as_view(), name="item"),
    path("items/<str:item_id>/history", items.ItemHistoryView.as_view(), name="item-history"),
    path("items/<str:item_id>/forget", items.ItemForgetView.as_view(), name="item-forget"),
    path("facts/<path:path>", items.FactsView.as_view(), name="facts"),
    path("memory-tools", items.MemoryToolsView.as_view(), name="memory-tools"),
    # Memory files: the memory tool, lists, history, versions and the working note.
    path("memory-tool", files.MemoryToolView.as_view(), name="memory-tool"),
    path("memory-files", files.MemoryFilesListView.as_view(), name="memory-files"),
    path("memory-files/history", files.MemoryFileHistoryView.as_view(), name="memory-file-history"),
    path("memory-files/versions/<str:version_id>", files.MemoryFileVersionView.as_view(), name="memory-file-version"),
    path("working-note", files.WorkingNoteView.as_view(), name="working-note"),
    # Compaction, extraction and cleared tool results.
    path("threads/<str:thread_id>/compact", compaction.ThreadCompactView.as_view(), name="thread-compact"),
    path("threads/<str:thread_id>/extract", compaction.ThreadExtractView.as_view(), name="thread-extract"),
    path("tool-results/<str:handle>", compaction.ToolResultView.as_view(), name="tool-result"),
    path("settings/compaction", compaction.AgentAutoCompactionView.as_view(), name="compaction-settings"),
    path(
        "threads/<str:thread_id>/settings/compaction",
        compaction.ThreadAutoCompactionView.as_view(),
        name="thread-compaction-settings",
    ),
    # Change events: the SSE stream and its JSON pages.
    path("events", events.EventsStreamView.as_view(), name="events"),
    path("events/page", events.EventsPageView.as_view(), name="events-page"),
    # Standing instructions: context documents and a thread's memory switch.
    path("knowledge", knowledge.KnowledgeDocumentsView.as_view(), name="knowledge"),
    path("knowledge/search", knowledge.KnowledgeSearchView.as_view(), name="knowledge-search"),
    path("knowledge/<str:document_id>", knowledge.KnowledgeDocumentView.as_view(), name="knowledge-document"),
    path("context-documents", context_documents.ContextDocumentsView.as_view(), name="context-documents"),
    path("context-documents/<str:name>", context_documents.ContextDocumentView.as_view(), name="context-document"),
    path("threads/<str:thread_id>/memory", context_documents.ThreadMemoryView.as_view(), name="thread-memory"),
    # The person memory is about, and what the screening at write looks for.
    path("users/<str:user_id>/forget", users.UserForgetView.as_view(), name="user-forget"),
    path("users/<str:user_id>/identifiers", screening.UserIdentifiersView.as_view(), name="user-identifiers"),
    path("settings/screening", screening.ScreeningSettingsView.as_view(), name="screening-settings"),
    # What the agent's memory is collected for: recall may be bound to one purpose.
    path("settings/purposes", purposes.PurposeSettingsView.as_view(), name="purpose-settings"),
]
