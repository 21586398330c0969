"""The async client: `AsyncMemoryClient`. The sync `MemoryClient` (`_sync.py`) is generated from this
file by `generate.py` (its async keywords taken out), so the two cannot drift apart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, cast
from urllib.parse import quote

import httpx2

from memory_client._core import (
    UNCHECKED,
    RetryPolicy,
    SseDecoder,
    StreamEvent,
    Unchecked,
    answer_of,
    next_request,
    query_value,
    types_value,
    without_none,
)
from memory_client.models import (
    ApiRootOut,
    AutoCompactionOut,
    CompactedOut,
    CompactionSkippedOut,
    ContextDocumentContentOut,
    ContextDocumentsOut,
    ContextOut,
    EntryBatchOut,
    EntryOut,
    EntryPageOut,
    EventOut,
    EventPageOut,
    ExtractionOut,
    FactForgottenOut,
    FactOut,
    FactPageOut,
    FileHistoryOut,
    IdentifiersOut,
    ItemOut,
    ItemPageOut,
    ItemWithEvidenceOut,
    JobAcceptedOut,
    KnowledgeDocumentContentOut,
    KnowledgeDocumentsOut,
    KnowledgeSearchOut,
    MemoryEnum,
    MemoryFilesOut,
    MemoryToolAnswerOut,
    MemoryToolListOut,
    MemoryToolResultOut,
    NamespaceForgottenOut,
    PathPageOut,
    PurposesOut,
    RunEventsPublishedOut,
    RunOut,
    RunSnapshotOut,
    ScreeningPolicyOut,
    SearchOut,
    SessionDetailOut,
    SessionOpenedOut,
    SessionOut,
    SessionPageOut,
    ThreadAutoCompactionOut,
    ThreadMemoryOut,
    ThreadOut,
    ThreadPageOut,
    ToolResultOut,
    UserForgetOut,
    VersionContentOut,
    WorkingNoteOut,
)

API = "/api/v1"
Params = Mapping[str, Any] | list[tuple[str, Any]]


class AsyncMemoryClient:
    """The agent API of the memory service, under one agent's key.

    Every method is one operation of the API (its operationId in `OPERATIONS`), answers the typed
    JSON the OpenAPI schema declares (`memory_client.models`), and raises an `ApiError` subclass
    carrying the error shape. 429 and 5xx answers are retried as `retry` says; `iter_*` follow pages.

        async with AsyncMemoryClient("http://127.0.0.1:8000", key="mk_...") as memory:
            await memory.create_thread(id="t-1", user_id="ana")
    """

    def __init__(
        self,
        base_url: str,
        *,
        key: str,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._http = httpx2.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {key}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- the one way out ---------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json_body: Any = None,
        content: bytes | None = None,
        content_type: str | None = None,
        run_id: str | None = None,
    ) -> Any:
        """Send one request (again, as the retry policy says) and answer its JSON; an error raises."""
        query = _query(params)
        headers = {"Content-Type": content_type} if content_type else {}
        if run_id:
            headers["X-Run-Id"] = run_id
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    method, path, params=query, json=json_body, content=content, headers=headers or None
                )
            except httpx2.TransportError:
                if not self.retry.should_retry(method=method, status=None, attempt=attempt):
                    raise
                await asyncio.sleep(self.retry.delay(attempt=attempt, response=None))
                attempt += 1
                continue
            if response.status_code < 400 or not self.retry.should_retry(
                method=method, status=response.status_code, attempt=attempt
            ):
                return answer_of(response)
            await asyncio.sleep(self.retry.delay(attempt=attempt, response=response))
            attempt += 1

    async def _pages(self, path: str, params: Params) -> AsyncIterator[dict[str, Any]]:
        """Each page of a list, following its `next` link until there is none."""
        page = await self._request("GET", path, params=params)
        while True:
            yield page
            following = next_request(page.get("next"))
            if following is None:
                return
            page = await self._request("GET", following[0], params=following[1])

    # --- the API's root --------------------------------------------------------------------------

    async def root(self) -> ApiRootOut:
        """The agent of the key, and where the schema and docs are."""
        return cast(ApiRootOut, await self._request("GET", f"{API}/"))

    # --- threads ---------------------------------------------------------------------------------

    async def create_thread(
        self, *, id: str | None = None, user_id: str | None = None, metadata: dict[str, Any] | None = None
    ) -> ThreadOut:
        """Create a thread, or update the one of that id (an idempotent upsert)."""
        body = without_none(id=id, user_id=user_id, metadata=metadata)
        return cast(ThreadOut, await self._request("POST", f"{API}/threads", json_body=body))

    async def list_threads(
        self,
        *,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        updated_after: datetime | str | None = None,
        updated_before: datetime | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ThreadPageOut:
        """One page of threads, newest updated first (`next` / `next_cursor`: the following page)."""
        params = without_none(
            user_id=user_id,
            metadata=json.dumps(metadata) if metadata is not None else None,
            updated_after=updated_after,
            updated_before=updated_before,
            limit=limit,
            cursor=cursor,
        )
        return cast(ThreadPageOut, await self._request("GET", f"{API}/threads", params=params))

    async def iter_threads(
        self,
        *,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        updated_after: datetime | str | None = None,
        updated_before: datetime | str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[ThreadOut]:
        """Every thread that matches, page after page."""
        params = without_none(
            user_id=user_id,
            metadata=json.dumps(metadata) if metadata is not None else None,
            updated_after=updated_after,
            updated_before=updated_before,
            limit=page_size,
        )
        async for page in self._pages(f"{API}/threads", params):
            for thread in page["results"]:
                yield cast(ThreadOut, thread)

    async def get_thread(self, thread_id: str) -> ThreadOut:
        return cast(ThreadOut, await self._request("GET", f"{API}/threads/{thread_id}"))

    async def update_thread(
        self,
        thread_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        user_id: str | None = None,
        replace_metadata: bool | None = None,
        on_busy: Literal["wait", "reject", "interrupt", ""] | None = None,
        busy_timeout_seconds: int | None = None,
    ) -> ThreadOut:
        """Merge metadata (a None value removes a key; `replace_metadata` replaces it whole), set the person,
        the thread's busy policy (`on_busy`, `busy_timeout_seconds`; "" and 0: its agent's)."""
        body = without_none(
            user_id=user_id,
            replace_metadata=replace_metadata,
            on_busy=on_busy,
            busy_timeout_seconds=busy_timeout_seconds,
        )
        if metadata is not None:
            body["metadata"] = metadata
        return cast(ThreadOut, await self._request("PATCH", f"{API}/threads/{thread_id}", json_body=body))

    async def delete_thread(self, thread_id: str) -> None:
        """Delete a thread with its entries and what memory derived from them only."""
        await self._request("DELETE", f"{API}/threads/{thread_id}")

    # --- entries ---------------------------------------------------------------------------------

    async def append(
        self, thread_id: str, *, role: str, content: Any = None, run_id: str | None = None, **fields: Any
    ) -> EntryOut:
        """Add one entry after the active leaf (`parent_id`, `activate`, `type`, `tool_calls`, ... as fields).

        With `run_id` (a run of `start_run`), refused with a ConflictError `run_ended` once the run
        was interrupted or expired."""
        body = {"role": role, **({"content": content} if content is not None else {}), **fields}
        answer = await self._request("POST", f"{API}/threads/{thread_id}/entries", json_body=body, run_id=run_id)
        return cast(EntryOut, answer)

    async def append_batch(
        self, thread_id: str, entries: list[dict[str, Any]], *, run_id: str | None = None
    ) -> EntryBatchOut:
        """Add up to 1,000 entries in one transaction, each after the one before (`run_id` as `append`)."""
        answer = await self._request(
            "POST", f"{API}/threads/{thread_id}/entries", json_body={"entries": entries}, run_id=run_id
        )
        return cast(EntryBatchOut, answer)

    async def start_run(self, thread_id: str) -> RunOut:
        """Start a run on the thread (002 onBusy): a busy thread waits, refuses (ConflictError
        `thread_busy`) or interrupts the running run, as the thread or its agent is set."""
        return cast(RunOut, await self._request("POST", f"{API}/threads/{thread_id}/runs", json_body={}))

    async def get_run(self, thread_id: str, run_id: str) -> RunOut:
        return cast(RunOut, await self._request("GET", f"{API}/threads/{thread_id}/runs/{run_id}"))

    async def finish_run(self, thread_id: str, run_id: str) -> RunOut:
        """Finish a run (the thread is free); ConflictError `run_ended` when it was interrupted or expired."""
        return cast(RunOut, await self._request("POST", f"{API}/threads/{thread_id}/runs/{run_id}/finish"))

    # --- channel sessions -------------------------------------------------------------------------

    async def open_session(self, *, user_id: str, channel_type: str, channel_id: str) -> SessionOpenedOut:
        """Get or create the active session of a channel conversation (004 SessionManager): its
        thread, its compaction settings and whether this call made it (`created`)."""
        body = {"user_id": user_id, "channel_type": channel_type, "channel_id": channel_id}
        return cast(SessionOpenedOut, await self._request("POST", f"{API}/sessions", json_body=body))

    async def list_sessions(
        self,
        *,
        user_id: str | None = None,
        status: Literal["active", "closed"] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> SessionPageOut:
        """One page of sessions, newest first (`next` / `next_cursor`: the following page)."""
        params = without_none(user_id=user_id, status=status, limit=limit, cursor=cursor)
        return cast(SessionPageOut, await self._request("GET", f"{API}/sessions", params=params))

    async def iter_sessions(
        self,
        *,
        user_id: str | None = None,
        status: Literal["active", "closed"] | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[SessionOut]:
        """Every session that matches, newest first, page after page."""
        params = without_none(user_id=user_id, status=status, limit=page_size)
        async for page in self._pages(f"{API}/sessions", params):
            for session in page["results"]:
                yield cast(SessionOut, session)

    async def get_session(self, session_id: str) -> SessionDetailOut:
        return cast(SessionDetailOut, await self._request("GET", f"{API}/sessions/{quote(session_id, safe='')}"))

    async def close_session(self, session_id: str) -> SessionDetailOut:
        """Close the session: its thread stays; the channel's next open_session makes a new one."""
        path = f"{API}/sessions/{quote(session_id, safe='')}/close"
        return cast(SessionDetailOut, await self._request("POST", path))

    async def reopen_session(self, session_id: str) -> SessionDetailOut:
        """Make a closed session active again; ConflictError `session_active` while another session of
        its channel is active."""
        path = f"{API}/sessions/{quote(session_id, safe='')}/reopen"
        return cast(SessionDetailOut, await self._request("POST", path))

    async def list_entries(
        self,
        thread_id: str,
        *,
        types: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        before: datetime | str | None = None,
        after: datetime | str | None = None,
    ) -> EntryPageOut:
        """The newest `limit` entries of every branch, oldest first (`next`: the page of older ones)."""
        params = without_none(types=types, limit=limit, cursor=cursor, before=before, after=after)
        return cast(EntryPageOut, await self._request("GET", f"{API}/threads/{thread_id}/entries", params=params))

    async def iter_entries(
        self,
        thread_id: str,
        *,
        types: str | None = None,
        before: datetime | str | None = None,
        after: datetime | str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[EntryOut]:
        """Every entry, newest page first and each page oldest first (as the API pages back)."""
        params = without_none(types=types, before=before, after=after, limit=page_size)
        async for page in self._pages(f"{API}/threads/{thread_id}/entries", params):
            for entry in page["results"]:
                yield cast(EntryOut, entry)

    async def path(
        self,
        thread_id: str,
        *,
        leaf: str | None = None,
        limit: int | None = None,
        before: str | None = None,
        types: str | None = None,
    ) -> PathPageOut:
        """One branch (the active one, or up to `leaf`), oldest first; `next` pages back."""
        params = without_none(leaf=leaf, limit=limit, before=before, types=types)
        return cast(PathPageOut, await self._request("GET", f"{API}/threads/{thread_id}/path", params=params))

    async def iter_path(
        self, thread_id: str, *, leaf: str | None = None, types: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[EntryOut]:
        """Every entry of a branch, newest page first and each page oldest first."""
        params = without_none(leaf=leaf, types=types, limit=page_size)
        async for page in self._pages(f"{API}/threads/{thread_id}/path", params):
            for entry in page["results"]:
                yield cast(EntryOut, entry)

    async def rewind(self, thread_id: str, entry_id: str) -> ThreadOut:
        """Move the active leaf back to an entry of the active branch (nothing is deleted)."""
        body = {"entry_id": entry_id}
        return cast(ThreadOut, await self._request("POST", f"{API}/threads/{thread_id}/rewind", json_body=body))

    async def checkout(self, thread_id: str, entry_id: str) -> ThreadOut:
        """Make any entry the active leaf (switch branches)."""
        body = {"entry_id": entry_id}
        return cast(ThreadOut, await self._request("POST", f"{API}/threads/{thread_id}/checkout", json_body=body))

    async def fork(self, thread_id: str, entry_id: str, *, new_thread_id: str | None = None) -> ThreadOut:
        """A new thread holding the branch up to `entry_id`."""
        body = without_none(entry_id=entry_id, new_thread_id=new_thread_id)
        return cast(ThreadOut, await self._request("POST", f"{API}/threads/{thread_id}/fork", json_body=body))

    async def get_entry(self, entry_id: str) -> EntryOut:
        return cast(EntryOut, await self._request("GET", f"{API}/entries/{entry_id}"))

    async def delete_entry(self, entry_id: str, *, keep_replies: bool | None = None) -> None:
        """Delete an entry; its children go under its parent. A user message takes its replies (up to the
        next user message) unless `keep_replies`."""
        params = {"keep_replies": query_value(keep_replies)} if keep_replies is not None else None
        await self._request("DELETE", f"{API}/entries/{entry_id}", params=params)

    async def redact_entry(
        self, entry_id: str, *, reason: str | None = None, keep_replies: bool | None = None
    ) -> EntryOut:
        """Replace an entry's content, keeping its place in the tree (a user message's replies too,
        unless `keep_replies`)."""
        body = without_none(reason=reason, keep_replies=keep_replies)
        return cast(EntryOut, await self._request("POST", f"{API}/entries/{entry_id}/redact", json_body=body))

    async def export_thread(self, thread_id: str) -> str:
        """The thread as JSONL (000's session records)."""
        return cast(str, await self._request("GET", f"{API}/threads/{thread_id}/export"))

    async def import_thread(self, jsonl: str, *, id: str | None = None) -> ThreadOut:
        """A new thread from JSONL lines (an export's)."""
        answer = await self._request(
            "POST",
            f"{API}/threads/import",
            params=without_none(id=id),
            content=jsonl.encode(),
            content_type="application/x-ndjson",
        )
        return cast(ThreadOut, answer)

    # --- recall ----------------------------------------------------------------------------------

    async def search(
        self,
        text: str,
        *,
        thread_id: str | None = None,
        user_id: str | None = None,
        kinds: list[Literal["entries", "items"]] | None = None,
        limit: int | None = None,
        method: Literal["keyword", "vector", "hybrid"] | None = None,
        as_of: datetime | str | None = None,
        purpose: str | None = None,
    ) -> SearchOut:
        """`purpose`: only items collected for it or for none (one of `purpose_settings()`)."""
        body = without_none(
            text=text,
            thread_id=thread_id,
            user_id=user_id,
            kinds=kinds,
            limit=limit,
            method=method,
            as_of=query_value(as_of),
            purpose=purpose,
        )
        return cast(SearchOut, await self._request("POST", f"{API}/search", json_body=body))

    async def build_context(self, thread_id: str, *, max_tokens: int, **options: Any) -> ContextOut:
        """The messages for the next model call within `max_tokens` (`strategy`, `current_input`, ...)."""
        body = {"max_tokens": max_tokens, **{k: query_value(v) for k, v in options.items() if v is not None}}
        return cast(ContextOut, await self._request("POST", f"{API}/threads/{thread_id}/context", json_body=body))

    # --- memory items and facts ------------------------------------------------------------------

    async def list_items(self, **filters: Any) -> ItemPageOut:
        """One page of items (`user_id`, `project_id`, `thread_id`, `status`, `kind`, `as_of`, `limit`, `cursor`, ...)."""
        params = {k: v for k, v in filters.items() if v is not None}
        return cast(ItemPageOut, await self._request("GET", f"{API}/items", params=params))

    async def iter_items(self, **filters: Any) -> AsyncIterator[ItemOut]:
        """Every item that matches, page after page."""
        params = {k: v for k, v in filters.items() if v is not None}
        async for page in self._pages(f"{API}/items", params):
            for item in page["results"]:
                yield cast(ItemOut, item)

    async def get_item(self, item_id: str) -> ItemWithEvidenceOut:
        return cast(ItemWithEvidenceOut, await self._request("GET", f"{API}/items/{item_id}"))

    async def item_history(self, item_id: str) -> ItemPageOut:
        """Every value the item's slot held."""
        return cast(ItemPageOut, await self._request("GET", f"{API}/items/{item_id}/history"))

    async def create_item(
        self, *, kind: str, subject: str, attribute: str, value: str, **fields: Any
    ) -> ItemWithEvidenceOut:
        """Write a memory item (`trust`, `evidence`, `user_id`, ... as fields); at most the key's trust."""
        body = {"kind": kind, "subject": subject, "attribute": attribute, "value": value, **fields}
        return cast(ItemWithEvidenceOut, await self._request("POST", f"{API}/items", json_body=body))

    async def forget_item(self, item_id: str) -> ItemOut:
        """Let an item's state go (its history is kept)."""
        return cast(ItemOut, await self._request("POST", f"{API}/items/{item_id}/forget"))

    async def forget_user(self, user_id: str, *, mode: Literal["erase", "redact"] | None = None) -> UserForgetOut:
        """Erase what this agent holds about a person (threads, messages, items, facts, files); the counts."""
        body = without_none(mode=mode)
        return cast(UserForgetOut, await self._request("POST", f"{API}/users/{user_id}/forget", json_body=body))

    async def user_identifiers(self, user_id: str) -> IdentifiersOut:
        """The identifiers registered for a person (normalised: e-mail lower-cased, phone E.164, names folded)."""
        return cast(IdentifiersOut, await self._request("GET", f"{API}/users/{user_id}/identifiers"))

    async def set_user_identifiers(
        self,
        user_id: str,
        *,
        emails: Sequence[str] = (),
        phones: Sequence[str] = (),
        names: Sequence[str] = (),
        external_ids: Sequence[str] = (),
    ) -> IdentifiersOut:
        """Replace the person's identifiers by these (screening's `person` category finds them)."""
        body = {
            "emails": list(emails),
            "phones": list(phones),
            "names": list(names),
            "external_ids": list(external_ids),
        }
        answer = await self._request("PUT", f"{API}/users/{user_id}/identifiers", json_body=body)
        return cast(IdentifiersOut, answer)

    async def put_fact(
        self,
        namespace: str,
        key: str,
        value: Any,
        *,
        ttl_secs: int | None = None,
        purposes: list[str] | None = None,
    ) -> FactOut:
        body = without_none(value=value, ttl_secs=ttl_secs, purposes=purposes)
        return cast(FactOut, await self._request("PUT", f"{API}/facts/{namespace}/{key}", json_body=body))

    async def get_fact(self, namespace: str, key: str) -> FactOut:
        return cast(FactOut, await self._request("GET", f"{API}/facts/{namespace}/{key}"))

    async def search_facts(
        self,
        namespace: str,
        *,
        q: str = "",
        limit: int | None = None,
        purpose: str | None = None,
        mode: str | None = None,
    ) -> FactPageOut:
        """The facts of a namespace (and those inside it) holding the words of `q` or saying the same
        in other words, best first (`mode`: keyword, semantic or hybrid, the default; with `purpose`:
        only those collected for it or for none)."""
        params = without_none(q=q, limit=limit, purpose=purpose, mode=mode)
        return cast(FactPageOut, await self._request("GET", f"{API}/facts/{namespace}", params=params))

    async def forget_fact(self, namespace: str, key: str) -> FactForgottenOut:
        return cast(FactForgottenOut, await self._request("DELETE", f"{API}/facts/{namespace}/{key}"))

    async def forget_namespace(self, namespace: str) -> NamespaceForgottenOut:
        """Delete every fact of a namespace and those inside it, history included."""
        answer = await self._request("DELETE", f"{API}/facts/{namespace}", params={"all": "true"})
        return cast(NamespaceForgottenOut, answer)

    async def memory_tools_list(self) -> MemoryToolListOut:
        """The memory tools with their input schemas, as the MCP server's tools/list names them."""
        return cast(MemoryToolListOut, await self._request("GET", f"{API}/memory-tools"))

    async def memory_tools(
        self,
        name: Literal["remember", "forget", "search_memory", "read_result"],
        tool_input: dict[str, Any],
        *,
        user_id: str | None = None,
        thread_id: str | None = None,
        namespace: str | None = None,
        ttl_secs: int | None = None,
        purpose: str | None = None,
    ) -> MemoryToolResultOut:
        """Run the model's remember / forget / search_memory / read_result call: `result` is the text
        for the model. `user_id`, `thread_id` and `namespace` are the scope the model's input stays in; `purpose` the
        run's (what remember collects for and search_memory recalls)."""
        body = {
            "name": name,
            "input": tool_input,
            **without_none(
                user_id=user_id, thread_id=thread_id, namespace=namespace, ttl_secs=ttl_secs, purpose=purpose
            ),
        }
        return cast(MemoryToolResultOut, await self._request("POST", f"{API}/memory-tools", json_body=body))

    # --- memory files --------------------------------------------------------------------------------

    async def memory_tool(
        self,
        command: dict[str, Any],
        *,
        user_id: str | None = None,
        project_id: str | None = None,
        thread_id: str | None = None,
        place: str | None = None,
        read_only: bool | None = None,
        author: str | None = None,
    ) -> MemoryToolAnswerOut:
        """Run one memory tool command as the model gave it. A refused command raises an ApiError
        whose `result` is the text the model should read."""
        params = without_none(
            user_id=user_id, project_id=project_id, thread_id=thread_id, place=place, read_only=read_only, author=author
        )
        answer = await self._request("POST", f"{API}/memory-tool", params=params, json_body=command)
        return cast(MemoryToolAnswerOut, answer)

    async def list_memory_files(
        self,
        *,
        user_id: str | None = None,
        project_id: str | None = None,
        thread_id: str | None = None,
        under: str | None = None,
    ) -> MemoryFilesOut:
        params = without_none(user_id=user_id, project_id=project_id, thread_id=thread_id, under=under)
        return cast(MemoryFilesOut, await self._request("GET", f"{API}/memory-files", params=params))

    async def memory_file_history(
        self,
        path: str,
        *,
        user_id: str | None = None,
        project_id: str | None = None,
        thread_id: str | None = None,
    ) -> FileHistoryOut:
        params = without_none(path=path, user_id=user_id, project_id=project_id, thread_id=thread_id)
        return cast(FileHistoryOut, await self._request("GET", f"{API}/memory-files/history", params=params))

    async def memory_file_version(self, version_id: str) -> VersionContentOut:
        answer = await self._request("GET", f"{API}/memory-files/versions/{version_id}")
        return cast(VersionContentOut, answer)

    async def read_working_note(
        self, *, user_id: str | None = None, project_id: str | None = None, thread_id: str | None = None
    ) -> WorkingNoteOut:
        params = without_none(user_id=user_id, project_id=project_id, thread_id=thread_id)
        return cast(WorkingNoteOut, await self._request("GET", f"{API}/working-note", params=params))

    async def working_note(
        self,
        action: Literal["read", "replace", "append"],
        content: str | None = None,
        *,
        user_id: str | None = None,
        project_id: str | None = None,
        thread_id: str | None = None,
    ) -> WorkingNoteOut:
        params = without_none(user_id=user_id, project_id=project_id, thread_id=thread_id)
        body = without_none(action=action, content=content)
        return cast(WorkingNoteOut, await self._request("POST", f"{API}/working-note", params=params, json_body=body))

    # --- compaction and extraction ---------------------------------------------------------------

    async def compact(
        self, thread_id: str, *, strategy: str, run_id: str | None = None, **options: Any
    ) -> CompactedOut | CompactionSkippedOut | JobAcceptedOut:
        """Compact the active branch (`async_=False` runs a model-backed strategy in the request;
        `run_id`: the thread's run that asks, named in the audit of each model call)."""
        body = {"strategy": strategy, **_keyword_options(options)}
        answer = await self._request("POST", f"{API}/threads/{thread_id}/compact", json_body=body, run_id=run_id)
        return cast(CompactedOut | CompactionSkippedOut | JobAcceptedOut, answer)

    async def extract(
        self, thread_id: str, *, async_: bool | None = None, run_id: str | None = None
    ) -> ExtractionOut | JobAcceptedOut:
        """Extract memory items from the thread's new entries (a job unless `async_=False`; `run_id`
        as `compact`)."""
        body = without_none(**{"async": async_})
        answer = await self._request("POST", f"{API}/threads/{thread_id}/extract", json_body=body, run_id=run_id)
        return cast(ExtractionOut | JobAcceptedOut, answer)

    async def tool_result(self, handle: str) -> ToolResultOut:
        """A tool result that compaction cleared (the `read_result` tool)."""
        return cast(ToolResultOut, await self._request("GET", f"{API}/tool-results/{handle}"))

    # --- automatic compaction settings -----------------------------------------------------------

    async def compaction_settings(self) -> AutoCompactionOut:
        """The agent's automatic compaction (enabled, window, trigger share, strategy, summarizer)."""
        return cast(AutoCompactionOut, await self._request("GET", f"{API}/settings/compaction"))

    async def set_compaction_settings(self, **settings: Any) -> AutoCompactionOut:
        """Change the settings given (the others stay)."""
        answer = await self._request("PATCH", f"{API}/settings/compaction", json_body=settings)
        return cast(AutoCompactionOut, answer)

    async def thread_compaction_settings(self, thread_id: str) -> ThreadAutoCompactionOut:
        """A thread's own automatic compaction settings and what it gets with its agent's."""
        answer = await self._request("GET", f"{API}/threads/{thread_id}/settings/compaction")
        return cast(ThreadAutoCompactionOut, answer)

    async def set_thread_compaction_settings(self, thread_id: str, **settings: Any) -> ThreadAutoCompactionOut:
        """Set the thread's own settings (None: back to its agent's)."""
        answer = await self._request("PATCH", f"{API}/threads/{thread_id}/settings/compaction", json_body=settings)
        return cast(ThreadAutoCompactionOut, answer)

    # --- screening at write ----------------------------------------------------------------------

    async def screening_settings(self) -> ScreeningPolicyOut:
        """The agent's action per category (allow, redact, hold, refuse)."""
        return cast(ScreeningPolicyOut, await self._request("GET", f"{API}/settings/screening"))

    async def set_screening_settings(self, **policy: str) -> ScreeningPolicyOut:
        """Change the categories given (`email="redact"`); the others stay."""
        answer = await self._request("PATCH", f"{API}/settings/screening", json_body=policy)
        return cast(ScreeningPolicyOut, answer)

    # --- purposes: what memory is collected for (purpose-bound recall) -------------------------------

    async def purpose_settings(self) -> PurposesOut:
        """The agent's purposes (items and facts may carry them; recall may be bound to one)."""
        return cast(PurposesOut, await self._request("GET", f"{API}/settings/purposes"))

    async def set_purpose_settings(self, purposes: list[str]) -> PurposesOut:
        """Replace the agent's purposes (short slugs such as `support`)."""
        answer = await self._request("PATCH", f"{API}/settings/purposes", json_body={"purposes": purposes})
        return cast(PurposesOut, answer)

    # --- standing instructions: context documents and the memory switch --------------------------

    async def list_context_documents(
        self, *, project_id: str | None = None, thread_id: str | None = None
    ) -> ContextDocumentsOut:
        """The context documents of one scope: the agent's (neither id), a project's or a thread's."""
        params = without_none(project_id=project_id, thread_id=thread_id)
        return cast(ContextDocumentsOut, await self._request("GET", f"{API}/context-documents", params=params))

    async def get_context_document(
        self, name: str, *, project_id: str | None = None, thread_id: str | None = None
    ) -> ContextDocumentContentOut:
        params = without_none(project_id=project_id, thread_id=thread_id)
        answer = await self._request("GET", f"{API}/context-documents/{_segment(name)}", params=params)
        return cast(ContextDocumentContentOut, answer)

    async def put_context_document(
        self,
        name: str,
        content: str,
        *,
        expected_sha256: str | Unchecked | None = UNCHECKED,
        project_id: str | None = None,
        thread_id: str | None = None,
    ) -> ContextDocumentContentOut:
        """Write a standing instruction document (AGENTS.md ...) whole: a new version unless the text is
        the same. `expected_sha256`: the sha256 last read (a ConflictError if it changed since), None:
        only if there is no such document yet; left out, whatever is there is replaced."""
        params = without_none(project_id=project_id, thread_id=thread_id)
        body: dict[str, Any] = {"content": content}
        if expected_sha256 is not UNCHECKED:
            body["expected_sha256"] = expected_sha256
        answer = await self._request("PUT", f"{API}/context-documents/{_segment(name)}", params=params, json_body=body)
        return cast(ContextDocumentContentOut, answer)

    async def delete_context_document(
        self, name: str, *, project_id: str | None = None, thread_id: str | None = None
    ) -> None:
        """Delete a context document (its history stays, as a memory file's)."""
        params = without_none(project_id=project_id, thread_id=thread_id)
        await self._request("DELETE", f"{API}/context-documents/{_segment(name)}", params=params)

    # --- knowledge documents: the semantic context ------------------------------------------------

    async def list_knowledge(self, *, project_id: str | None = None) -> KnowledgeDocumentsOut:
        """The agent's knowledge documents (of one project, when named), without their text."""
        params = without_none(project_id=project_id)
        return cast(KnowledgeDocumentsOut, await self._request("GET", f"{API}/knowledge", params=params))

    async def add_knowledge(
        self, name: str, content: str, *, project_id: str | None = None
    ) -> KnowledgeDocumentContentOut:
        """Add a knowledge document: chunked and embedded, searched by contexts with
        include_semantic_context (a ConflictError when the name is taken in that project)."""
        body = without_none(name=name, content=content, project_id=project_id)
        return cast(KnowledgeDocumentContentOut, await self._request("POST", f"{API}/knowledge", json_body=body))

    async def get_knowledge(self, document_id: str) -> KnowledgeDocumentContentOut:
        answer = await self._request("GET", f"{API}/knowledge/{_segment(document_id)}")
        return cast(KnowledgeDocumentContentOut, answer)

    async def replace_knowledge(
        self, document_id: str, content: str, *, name: str | None = None
    ) -> KnowledgeDocumentContentOut:
        """Replace a document's text (and name): cut and embedded again."""
        body = without_none(content=content, name=name)
        answer = await self._request("PUT", f"{API}/knowledge/{_segment(document_id)}", json_body=body)
        return cast(KnowledgeDocumentContentOut, answer)

    async def delete_knowledge(self, document_id: str) -> None:
        await self._request("DELETE", f"{API}/knowledge/{_segment(document_id)}")

    async def search_knowledge(
        self, text: str, *, project_id: str | None = None, limit: int | None = None
    ) -> KnowledgeSearchOut:
        """The passages of the agent's knowledge documents best for `text`."""
        body = without_none(text=text, project_id=project_id, limit=limit)
        return cast(KnowledgeSearchOut, await self._request("POST", f"{API}/knowledge/search", json_body=body))

    async def get_thread_memory(self, thread_id: str) -> ThreadMemoryOut:
        """The thread's memory switch: on or off, and the seqs written while it was off."""
        return cast(ThreadMemoryOut, await self._request("GET", f"{API}/threads/{thread_id}/memory"))

    async def set_thread_memory(self, thread_id: str, memory: MemoryEnum) -> ThreadMemoryOut:
        """Turn the thread's memory on or off (off: nothing extracted from it, nothing recalled into it)."""
        body = {"memory": memory}
        return cast(ThreadMemoryOut, await self._request("PUT", f"{API}/threads/{thread_id}/memory", json_body=body))

    # --- change events ---------------------------------------------------------------------------

    async def events_page(
        self, *, after: int | None = None, limit: int | None = None, types: str | Sequence[str] | None = None
    ) -> EventPageOut:
        """The agent's change events after the seq `after`, oldest first (`next_after`: where to go on)."""
        params = without_none(after=after, limit=limit, types=types_value(types))
        return cast(EventPageOut, await self._request("GET", f"{API}/events/page", params=params))

    async def iter_events(
        self, *, after: int | None = None, types: str | Sequence[str] | None = None, page_size: int | None = None
    ) -> AsyncIterator[EventOut]:
        """Every change event after `after` committed by now, page after page (each page's
        `next_after`), oldest first. Events retention deleted before they were read are skipped:
        `events_page` says which (`missed`)."""
        position = after or 0
        while True:
            page = await self.events_page(after=position, limit=page_size, types=types)
            for event in page["results"]:
                yield event
            if not page["results"] or page["next_after"] >= page["last_seq"]:
                return
            position = page["next_after"]

    async def events(
        self,
        *,
        last_event_id: int | str | None = None,
        after: int | None = None,
        types: str | Sequence[str] | None = None,
        max_seconds: float | None = None,
        reconnect: bool = False,
    ) -> AsyncIterator[StreamEvent]:
        """The agent's change events as they commit, read from the Server-Sent Events stream.

        The stream starts after `last_event_id` (an event's `last_event_id`, sent as the
        Last-Event-ID header), else after `after`, else after the newest event. The service closes
        a stream after EVENTS_STREAM_SECONDS (or `max_seconds`): without `reconnect` the iteration
        ends there; with it, the client connects again with the last id read (after the stream's
        `retry:` wait, and also when the connection dropped), so nothing is lost or repeated, until
        the caller stops iterating. Opening a stream is retried as the retry policy says (503
        too_many_streams: each web process serves a few streams at once)."""
        decoder = SseDecoder(str(last_event_id) if last_event_id is not None else None)
        params = without_none(after=after, types=types_value(types), max_seconds=max_seconds)
        while True:
            async for event in self._event_stream(decoder, params):
                yield event
            if not reconnect:
                return
            await asyncio.sleep((decoder.retry_ms if decoder.retry_ms is not None else 1000) / 1000)

    async def run_events(
        self,
        thread_id: str,
        run_id: str,
        *,
        last_event_id: int | str | None = None,
        after: int | None = None,
        max_seconds: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """A run's events in order (000 RunLedger), read from its Server-Sent Events stream: each
        event's `type` is its kind and `body` its fields (`seq`, `at`, `delta`, `snapshot` ...); "gap"
        names deltas the window deleted. Ends after `settled` or `faulted` (or when the service closes
        the stream: go on with `last_event_id=` the last event's)."""
        decoder = SseDecoder(str(last_event_id) if last_event_id is not None else None)
        params = without_none(after=after, max_seconds=max_seconds)
        async for event in self._event_stream(decoder, params, path=f"{API}/threads/{thread_id}/runs/{run_id}/events"):
            yield event

    async def publish_run_events(
        self, thread_id: str, run_id: str, events: Sequence[dict[str, Any]]
    ) -> RunEventsPublishedOut:
        """Publish events of a run, in order (`{"kind": "text_delta", "delta": ...}`, `snapshot`, `settled` ...);
        ConflictError `run_settled` once the run settled or faulted."""
        path = f"{API}/threads/{thread_id}/runs/{run_id}/events"
        return cast(RunEventsPublishedOut, await self._request("POST", path, json_body={"events": list(events)}))

    async def run_snapshot(self, thread_id: str, run_id: str) -> RunSnapshotOut:
        """The run's latest snapshot (000 SnapshotAccumulator), kept after it settled."""
        return cast(RunSnapshotOut, await self._request("GET", f"{API}/threads/{thread_id}/runs/{run_id}/snapshot"))

    async def _event_stream(
        self, decoder: SseDecoder, params: dict[str, Any], *, path: str = f"{API}/events"
    ) -> AsyncIterator[StreamEvent]:
        """One stream's events, until the service closes it. Opening it is retried as the retry policy
        says, and so is a connection that drops: the stream resumes after the last id read."""
        attempt = 0
        while True:
            decoder.restart()
            headers = {"Accept": "text/event-stream"}
            if decoder.last_event_id is not None:
                headers["Last-Event-ID"] = decoder.last_event_id
            try:
                async with self._http.stream("GET", path, params=_query(params), headers=headers) as response:
                    if response.status_code < 400:
                        async for line in response.aiter_lines():
                            event = decoder.feed(line.rstrip("\r\n"))
                            if event is not None:
                                attempt = 0
                                yield event
                        return
                    await response.aread()
                    if not self.retry.should_retry(method="GET", status=response.status_code, attempt=attempt):
                        answer_of(response)  # raises the error
                    wait = self.retry.delay(attempt=attempt, response=response)
            except httpx2.TransportError:
                if not self.retry.should_retry(method="GET", status=None, attempt=attempt):
                    raise
                wait = self.retry.delay(attempt=attempt, response=None)
            await asyncio.sleep(wait)
            attempt += 1


def _segment(name: str) -> str:
    """A name as one path segment: `#`, `?`, `%` and the rest escaped (a context document's name is any
    file name; unescaped, `AGENTS#old.md` would be sent as AGENTS, and `a?b.md` as a)."""
    return quote(name, safe="")


def _query(params: Params | None) -> list[tuple[str, Any]]:
    return [(k, query_value(v)) for k, v in (params.items() if isinstance(params, Mapping) else params or [])]


def _keyword_options(options: dict[str, Any]) -> dict[str, Any]:
    """Options named as Python allows (`async_`) as the API names them (`async`)."""
    return {name.rstrip("_"): value for name, value in options.items() if value is not None}


# Each method and the operation of the OpenAPI schema it calls (tests check their answers' types).
OPERATIONS: dict[str, str] = {
    "compaction_settings": "v1_settings_compaction_retrieve",
    "set_compaction_settings": "v1_settings_compaction_partial_update",
    "thread_compaction_settings": "v1_threads_settings_compaction_retrieve",
    "set_thread_compaction_settings": "v1_threads_settings_compaction_partial_update",
    "root": "v1_retrieve",
    "create_thread": "v1_threads_create",
    "list_threads": "v1_threads_list",
    "get_thread": "v1_threads_retrieve",
    "update_thread": "v1_threads_partial_update",
    "delete_thread": "v1_threads_destroy",
    "append": "v1_threads_entries_create",
    "append_batch": "v1_threads_entries_create",
    "list_entries": "v1_threads_entries_retrieve",
    "path": "v1_threads_path_retrieve",
    "rewind": "v1_threads_rewind_create",
    "checkout": "v1_threads_checkout_create",
    "fork": "v1_threads_fork_create",
    "start_run": "v1_threads_runs_create",
    "get_run": "v1_threads_runs_retrieve",
    "finish_run": "v1_threads_runs_finish_create",
    "publish_run_events": "v1_threads_runs_events_create",
    "run_events": "v1_threads_runs_events_retrieve",
    "run_snapshot": "v1_threads_runs_snapshot_retrieve",
    "open_session": "v1_sessions_create",
    "list_sessions": "v1_sessions_list",
    "get_session": "v1_sessions_retrieve",
    "close_session": "v1_sessions_close_create",
    "reopen_session": "v1_sessions_reopen_create",
    "get_entry": "v1_entries_retrieve",
    "delete_entry": "v1_entries_destroy",
    "redact_entry": "v1_entries_redact_create",
    "export_thread": "v1_threads_export_retrieve",
    "import_thread": "v1_threads_import_create",
    "search": "v1_search_create",
    "build_context": "v1_threads_context_create",
    "list_items": "v1_items_list",
    "get_item": "v1_items_retrieve",
    "item_history": "v1_items_history_retrieve",
    "create_item": "v1_items_create",
    "forget_item": "v1_items_forget_create",
    "forget_user": "v1_users_forget_create",
    "user_identifiers": "v1_users_identifiers_retrieve",
    "set_user_identifiers": "v1_users_identifiers_update",
    "screening_settings": "v1_settings_screening_retrieve",
    "set_screening_settings": "v1_settings_screening_partial_update",
    "purpose_settings": "v1_settings_purposes_retrieve",
    "set_purpose_settings": "v1_settings_purposes_partial_update",
    "put_fact": "v1_facts_update",
    "get_fact": "v1_facts_retrieve",
    "search_facts": "v1_facts_retrieve",
    "forget_fact": "v1_facts_destroy",
    "forget_namespace": "v1_facts_destroy",
    "memory_tools": "v1_memory_tools_create",
    "memory_tools_list": "v1_memory_tools_list",
    "memory_tool": "v1_memory_tool_create",
    "list_memory_files": "v1_memory_files_retrieve",
    "memory_file_history": "v1_memory_files_history_retrieve",
    "memory_file_version": "v1_memory_files_versions_retrieve",
    "read_working_note": "v1_working_note_retrieve",
    "working_note": "v1_working_note_create",
    "compact": "v1_threads_compact_create",
    "extract": "v1_threads_extract_create",
    "tool_result": "v1_tool_results_retrieve",
    "list_context_documents": "v1_context_documents_list",
    "get_context_document": "v1_context_documents_retrieve",
    "put_context_document": "v1_context_documents_update",
    "delete_context_document": "v1_context_documents_destroy",
    "list_knowledge": "v1_knowledge_list",
    "add_knowledge": "v1_knowledge_create",
    "get_knowledge": "v1_knowledge_retrieve",
    "replace_knowledge": "v1_knowledge_update",
    "delete_knowledge": "v1_knowledge_destroy",
    "search_knowledge": "v1_knowledge_search_create",
    "get_thread_memory": "v1_threads_memory_retrieve",
    "set_thread_memory": "v1_threads_memory_update",
    "events_page": "v1_events_page_retrieve",
    "events": "v1_events_retrieve",
}
