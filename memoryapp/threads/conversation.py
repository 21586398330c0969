"""Reads of one thread as a conversation to read: a page of one branch, and what hangs off it.

Staff read a thread as a transcript: the turns of one branch in order (the active one unless they
asked for another), a page at a time, with the other branches folded where they grow out, the
quotes memory items took from the turns, and the forks made from it. A page costs the same number
of queries whatever the length of the thread: the branch is walked by its parent pointers from one
end (`path_entries`, `path_after`), never read whole, and what the page's turns carry (side
branches, quotes, forks) is read for all of them at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection
from django.db.models import F
from django.db.models.functions import Substr

from governance.crypto.keyring import encryption_enabled
from memoryapp.errors import DomainError
from memoryapp.models import Entry, Evidence, Thread
from memoryapp.threads.selectors import entry_on_branch, path_after, path_entries

# Turns on one page; an anchored page holds about half before the anchor and half from it on.
PAGE_TURNS = 100
SIDE_PREVIEW_CHARS = 140


@dataclass(frozen=True)
class SideBranch:
    """Another branch growing out of a turn of the page: its first turn, size and newest turn."""

    first_id: str
    first_seq: int
    role: str
    type: str
    preview: str
    turns: int  # entries under it, its own branches included
    newest_id: str  # the leaf a link to it shows


@dataclass(frozen=True)
class QuoteMark:
    """A quote a memory item took from a turn."""

    item_id: str
    quote: str
    status: str
    slot: str
    let_go: bool


@dataclass(frozen=True)
class ForkLink:
    thread_pk: int
    external_id: str
    at_entry_id: str | None  # the entry of the origin the fork was made at (its last copy's original)


@dataclass
class ConversationPage:
    thread: Thread
    leaf_id: str | None  # the branch shown ends at this entry
    active: bool  # the branch shown is the active one
    entries: list[Entry]
    more_earlier: bool
    more_later: bool
    anchor_id: str | None = None
    side_branches: dict[str, list[SideBranch]] = field(default_factory=dict)
    quotes: dict[str, list[QuoteMark]] = field(default_factory=dict)
    forks: list[ForkLink] = field(default_factory=list)
    forks_at: dict[str, list[ForkLink]] = field(default_factory=dict)
    forked_from: ForkLink | None = None


def _seq_of(*, thread: Thread, entry_id: str, field_name: str) -> int:
    seq = Entry.objects.filter(thread=thread, id=entry_id).values_list("seq", flat=True).first()
    if seq is None:
        raise DomainError("unknown_entry", f"`{field_name}` is not an entry of this thread.", field=field_name)
    return int(seq)


def _newest_under(*, thread: Thread, entry_id: str) -> str:
    """The newest entry of the subtree under `entry_id` (itself when it has no children)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE sub(id, seq) AS (
                SELECT id, seq FROM memoryapp_entry WHERE id = %(start)s AND thread_id = %(thread)s
                UNION ALL
                SELECT e.id, e.seq FROM memoryapp_entry e JOIN sub s ON e.parent_id = s.id
                 WHERE e.thread_id = %(thread)s
            )
            SELECT id FROM sub ORDER BY seq DESC LIMIT 1
            """,
            {"start": entry_id, "thread": thread.pk},
        )
        row = cursor.fetchone()
    return str(row[0]) if row else entry_id


def _newest_entry(thread: Thread) -> str | None:
    return Entry.objects.filter(thread=thread).order_by("-seq").values_list("id", flat=True).first()


def conversation_page(
    *,
    thread: Thread,
    leaf_id: str | None = None,
    anchor_id: str | None = None,
    before_id: str | None = None,
    after_id: str | None = None,
    from_start: bool = False,
    size: int = PAGE_TURNS,
) -> ConversationPage:
    """One page of one branch of the thread, oldest first, with what hangs off its turns.

    1. The branch: the one ending at `leaf_id`, else the active one. An anchor that is not on it
       switches to the anchor's own branch (down to its newest entry): a link to a turn shows it.
       A thread with no active leaf shows the branch of its newest entry.
    2. The window (keyset on seq along the branch): around the anchor (half before it); the `size`
       before `before_id`; the `size` after `after_id`; the first `size` (`from_start`); else the
       newest `size`. One entry more is read on each open side to know whether there is more.
    3. For the page's turns at once: the other branches growing out of them (first turn, size,
       newest entry), the quotes memory items took from them, and forks made at them; and the
       thread's own fork origin.
    """
    if leaf_id is not None:
        _seq_of(thread=thread, entry_id=leaf_id, field_name="leaf")
    anchor_seq = _seq_of(thread=thread, entry_id=anchor_id, field_name="entry") if anchor_id else None
    leaf = leaf_id or thread.active_leaf_id or _newest_entry(thread)
    if anchor_id and leaf and not entry_on_branch(thread=thread, leaf_id=leaf, entry_id=anchor_id):
        leaf = _newest_under(thread=thread, entry_id=anchor_id)
    page = ConversationPage(
        thread=thread,
        leaf_id=leaf,
        active=bool(leaf) and leaf == thread.active_leaf_id,
        entries=[],
        more_earlier=False,
        more_later=False,
        anchor_id=anchor_id,
    )
    if not leaf:
        return page
    next_on_branch: str | None = None  # the turn right after the page on this branch
    if anchor_id and anchor_seq is not None:
        half = size // 2
        earlier = path_entries(thread=thread, leaf_id=leaf, before=anchor_id, limit=half + 1, types=None)
        later = path_after(thread=thread, leaf_id=leaf, after_seq=anchor_seq - 1, limit=size - half + 1)
        page.more_earlier, earlier = len(earlier) > half, earlier[-half:] if half else []
        if len(later) > size - half:
            page.more_later, next_on_branch = True, later[-1].id
            later = later[:-1]
        page.entries = earlier + later
    elif before_id:
        earlier = path_entries(thread=thread, leaf_id=leaf, before=before_id, limit=size + 1, types=None)
        page.more_earlier, page.entries = len(earlier) > size, earlier[-size:]
        page.more_later, next_on_branch = True, before_id
    elif after_id or from_start:
        after_seq = _seq_of(thread=thread, entry_id=after_id, field_name="after") if after_id else 0
        later = path_after(thread=thread, leaf_id=leaf, after_seq=after_seq, limit=size + 1)
        page.more_earlier = bool(after_id)
        if len(later) > size:
            page.more_later, next_on_branch = True, later[-1].id
            later = later[:-1]
        page.entries = later
    else:
        newest = path_entries(thread=thread, leaf_id=leaf, limit=size + 1, types=None)
        page.more_earlier, page.entries = len(newest) > size, newest[-size:]
    ids = [e.id for e in page.entries]
    if ids:
        page.side_branches = _side_branches(thread=thread, page_ids=ids, next_on_branch=next_on_branch)
        page.quotes = _quotes(thread=thread, page_ids=ids)
    page.forks = _forks(thread)
    for fork in page.forks:
        if fork.at_entry_id:
            page.forks_at.setdefault(fork.at_entry_id, []).append(fork)
    page.forked_from = _forked_from(thread)
    return page


def _side_branches(*, thread: Thread, page_ids: list[str], next_on_branch: str | None) -> dict[str, list[SideBranch]]:
    """The children of the page's turns that are not the next turn of the branch shown, each with
    the size of what grows under it and its newest entry (one walk for all of them)."""
    shown = set(page_ids) | ({next_on_branch} if next_on_branch else set())
    children = list(
        Entry.objects.filter(thread=thread, parent_id__in=page_ids)
        .exclude(id__in=list(shown))
        # A sealed text is cut once opened: a cut of its ciphertext would not open.
        .annotate(preview=F("text") if encryption_enabled() else Substr("text", 1, SIDE_PREVIEW_CHARS))
        .order_by("seq")
        .values_list("id", "parent_id", "seq", "role", "type", "preview")
    )
    if not children:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE sub(root, id, seq) AS (
                SELECT id, id, seq FROM memoryapp_entry WHERE thread_id = %(thread)s AND id = ANY(%(roots)s)
                UNION ALL
                SELECT s.root, e.id, e.seq FROM memoryapp_entry e JOIN sub s ON e.parent_id = s.id
                 WHERE e.thread_id = %(thread)s
            )
            SELECT DISTINCT ON (root) root, COUNT(*) OVER (PARTITION BY root), id
              FROM sub ORDER BY root, seq DESC
            """,
            {"thread": thread.pk, "roots": [c[0] for c in children]},
        )
        sizes = {root: (int(count), newest) for root, count, newest in cursor.fetchall()}
    branches: dict[str, list[SideBranch]] = {}
    for entry_id, parent_id, seq, role, kind, preview in children:
        turns, newest = sizes.get(entry_id, (1, entry_id))
        text = " ".join((preview or "")[: SIDE_PREVIEW_CHARS * 4].split())[:SIDE_PREVIEW_CHARS]
        branches.setdefault(parent_id, []).append(
            SideBranch(
                first_id=entry_id,
                first_seq=seq,
                role=role,
                type=kind,
                preview=text,
                turns=turns,
                newest_id=newest,
            )
        )
    return branches


def _quotes(*, thread: Thread, page_ids: list[str]) -> dict[str, list[QuoteMark]]:
    """The quotes memory items took from the page's turns, with their item's status and slot."""
    rows = (
        Evidence.objects.filter(agent_id=thread.agent_id, entry_id__in=page_ids)
        .order_by("created_at", "pk")
        .values_list(
            "entry_id", "item_id", "quote", "item__status", "item__subject", "item__attribute", "item__expired_at"
        )
    )
    quotes: dict[str, list[QuoteMark]] = {}
    for entry_id, item_id, quote, status, subject, attribute, expired_at in rows:
        slot = f"{subject} · {attribute}" if subject and attribute else subject or attribute
        quotes.setdefault(entry_id, []).append(
            QuoteMark(item_id=item_id, quote=quote, status=status, slot=slot, let_go=expired_at is not None)
        )
    return quotes


# The entry of the origin a fork was made at: the original of the fork's newest copy (a fork copies
# the branch up to that entry, each copy naming its original in `forkOf`; the walk down the
# (thread, seq) index stops at the first copy it meets).
_FORK_POINT = """(SELECT e.fork_of FROM memoryapp_entry e
      WHERE e.thread_id = {fork} AND e.fork_of <> '' ORDER BY e.seq DESC LIMIT 1)"""
# A thread page lists at most this many of its forks.
FORKS_SHOWN = 50


def _forks(thread: Thread) -> list[ForkLink]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT t.id, t.external_id, {_FORK_POINT.format(fork="t.id")} FROM memoryapp_thread t
                 WHERE t.agent_id = %(agent)s AND t.forked_from_id = %(origin)s
                 ORDER BY t.created_at, t.id LIMIT %(limit)s""",
            {"agent": thread.agent_id, "origin": thread.pk, "limit": FORKS_SHOWN},
        )
        return [ForkLink(thread_pk=pk, external_id=name, at_entry_id=at) for pk, name, at in cursor.fetchall()]


def _forked_from(thread: Thread) -> ForkLink | None:
    if thread.forked_from_id is None:
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT o.id, o.external_id, {_FORK_POINT.format(fork="%(fork)s")} FROM memoryapp_thread o
                 WHERE o.id = %(origin)s AND o.agent_id = %(agent)s""",
            {"fork": thread.pk, "origin": thread.forked_from_id, "agent": thread.agent_id},
        )
        row = cursor.fetchone()
    return ForkLink(thread_pk=row[0], external_id=row[1], at_entry_id=row[2]) if row else None
