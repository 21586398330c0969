"""Hierarchical compaction (004 "Hierarchical Compaction"): a tree of atoms, never summarized again.

Levels (`event["levels"]`): {"saga": node | None, "arcs": [node], "chapters": [node]}, each node
{"from", "to", "atoms"}; an atom is {"id", "kind", "status", "text", "evidence": [{"entry_id",
"quote"}], "verified", "source"}. Open items (open tasks, decisions, constraints, errors,
questions) are carried from compaction to compaction until an atom whose quotes hold closes them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from memoryapp.compaction.history import SUMMARY_HEADING
from memoryapp.compaction.plan import HIERARCHICAL as NAME
from memoryapp.compaction.plan import CompactionContext, CompactionPlan, HierarchicalOptions
from memoryapp.compaction.policy import cut_keeping_recent_tokens, entry_tokens, find_cut_point, history_tokens
from memoryapp.compaction.transcript import entry_body, entry_line, tool_call_names, tool_name_of
from memoryapp.errors import Conflict
from memoryapp.items.evidence import verify_evidence
from memoryapp.llm.arrays import ArrayAnswer, NoArrayError, ask_for_array
from memoryapp.llm.port import model_available, model_named, record_usage
from memoryapp.models import Entry
from memoryapp.models.choices import EntryType, EvidenceStatus, Role
from memoryapp.prompts import HIERARCHICAL, prompt
from memoryapp.tokens import count_message_tokens

ATOM_KINDS = ("fact", "task", "decision", "constraint", "error", "file", "thread")
KIND_ALIASES = {"question": "thread", "todo": "task", "requirement": "constraint", "bug": "error"}
# Kinds that stay open until closed by evidence.
OPEN_KINDS = ("task", "decision", "constraint", "error", "thread")
SAGA_KEEP = 200
# The handoff's sections, in the same order every time (the prompt cache keeps it).
SECTIONS = (
    ("Open tasks", lambda a: a["kind"] == "task" and a["status"] == "open"),
    ("Constraints", lambda a: a["kind"] == "constraint" and a["status"] == "open"),
    ("Decisions", lambda a: a["kind"] == "decision" and a["status"] == "open"),
    ("Unresolved errors", lambda a: a["kind"] == "error" and a["status"] == "open"),
    ("Open questions", lambda a: a["kind"] == "thread" and a["status"] == "open"),
    ("Files", lambda a: a["kind"] == "file"),
    ("Facts", lambda a: a["kind"] == "fact"),
    ("Done", lambda a: a["kind"] in OPEN_KINDS and a["status"] == "closed"),
)

_TASK_LINE = re.compile(r"^\s*(?:(?:[-*]\s*)?TODO:\s*(?P<todo>\S.*?)|[-*]\s*\[ \]\s*(?P<box>\S.*?))\s*$", re.MULTILINE)
_DONE_LINE = re.compile(r"^\s*[-*]\s*\[[xX]\]\s*(?P<done>\S.*?)\s*$", re.MULTILINE)
_ERROR_START = re.compile(r"^\s*(error\b|exception\b|traceback\b|fatal\b|failed\b)", re.IGNORECASE)
_FILE_KEYS = ("path", "file", "file_path", "filepath", "filename")
_SPACE = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def quote_holds(quote: str, entry: Entry) -> bool:
    """Whether the quote is in the entry, whitespace aside (memoryapp.items.evidence)."""
    return verify_evidence(quote, entry) == EvidenceStatus.VERIFIED  # type: ignore[arg-type]


def atom_id(kind: str, text: str) -> str:
    return "a-" + hashlib.sha256(f"{kind}\n{_norm(text)}".encode()).hexdigest()[:10]


def make_atom(
    *, kind: str, status: str, text: str, evidence: list[dict[str, str]], verified: bool, source: str
) -> dict[str, Any]:
    return {
        "id": atom_id(kind, text),
        "kind": kind,
        "status": status,
        "text": text,
        "evidence": evidence,
        "verified": verified,
        "source": source,
    }


# --- levels ------------------------------------------------------------------------------------


@dataclass
class Levels:
    saga: dict[str, Any] | None = None
    arcs: list[dict[str, Any]] = field(default_factory=list)
    chapters: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_event(cls, levels: Any) -> Levels:
        if not isinstance(levels, dict):
            return cls()
        return cls(
            saga=json.loads(json.dumps(levels.get("saga"))) if levels.get("saga") else None,
            arcs=json.loads(json.dumps(levels.get("arcs") or [])),
            chapters=json.loads(json.dumps(levels.get("chapters") or [])),
        )

    def as_event(self) -> dict[str, Any]:
        return {"saga": self.saga, "arcs": self.arcs, "chapters": self.chapters}

    def nodes(self) -> list[dict[str, Any]]:
        return ([self.saga] if self.saga else []) + self.arcs + self.chapters

    def atoms(self) -> list[dict[str, Any]]:
        return [atom for node in self.nodes() for atom in node.get("atoms", [])]

    def open_items(self) -> list[dict[str, Any]]:
        return [a for a in self.atoms() if a["kind"] in OPEN_KINDS and a["status"] == "open"]

    def done_items(self) -> list[dict[str, Any]]:
        return [a for a in self.atoms() if a["kind"] in OPEN_KINDS and a["status"] == "closed"]

    def find(self, item_id: str) -> dict[str, Any] | None:
        return next((a for a in self.atoms() if a["id"] == item_id), None)


def _merge_nodes(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """One node over several, their atoms merged (one atom per id, the later state winning)."""
    atoms: dict[str, dict[str, Any]] = {}
    for node in nodes:
        for atom in node.get("atoms", []):
            atoms[atom["id"]] = atom
    return {"from": nodes[0].get("from"), "to": nodes[-1].get("to"), "atoms": list(atoms.values())}


def _trim_saga(saga: dict[str, Any]) -> dict[str, Any]:
    """Every open item, and the newest SAGA_KEEP facts, files and done items each."""
    atoms = saga["atoms"]
    kept: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for atom in reversed(atoms):
        if atom["kind"] in OPEN_KINDS and atom["status"] == "open":
            kept.append(atom)
            continue
        group = atom["kind"] if atom["kind"] in ("fact", "file") else "done"
        counts[group] = counts.get(group, 0) + 1
        if counts[group] <= SAGA_KEEP:
            kept.append(atom)
    return {**saga, "atoms": list(reversed(kept))}


def fold_levels(levels: Levels, *, chapters_per_arc: int, arcs_per_saga: int) -> None:
    """Chapters beyond `chapters_per_arc` fold into arcs, arcs beyond `arcs_per_saga` into the saga."""
    per_arc = max(chapters_per_arc, 1)
    while len(levels.chapters) > per_arc:
        group, levels.chapters = levels.chapters[:per_arc], levels.chapters[per_arc:]
        levels.arcs.append(_merge_nodes(group))
    per_saga = max(arcs_per_saga, 1)
    while len(levels.arcs) > per_saga:
        group, levels.arcs = levels.arcs[:per_saga], levels.arcs[per_saga:]
        levels.saga = _trim_saga(_merge_nodes(([levels.saga] if levels.saga else []) + group))


# --- handoff -----------------------------------------------------------------------------------------


def handoff_text(levels: Levels) -> str:
    """The compaction's message: the sections in their fixed order, empty ones left out."""
    atoms: dict[str, dict[str, Any]] = {}
    for atom in levels.atoms():
        atoms[atom["id"]] = atom
    parts = [SUMMARY_HEADING]
    for title, belongs in SECTIONS:
        lines = [
            f"- {a['text']}" + ("" if a.get("verified") else " (unverified)") for a in atoms.values() if belongs(a)
        ]
        if lines:
            parts.append(f"## {title}\n" + "\n".join(lines))
    return "\n\n".join(parts)


def dropped_open_items(previous: Levels, current: Levels) -> list[str]:
    """Ids of open items of `previous` that `current` lost: neither still open nor closed by evidence."""
    lost = []
    for item in previous.open_items():
        now = current.find(item["id"])
        closed_on_evidence = bool((now or {}).get("closed_by", {}).get("verified"))
        if now is None or (now["status"] != "open" and not closed_on_evidence):
            lost.append(item["id"])
    return lost


# --- atoms without a model ------------------------------------------------------------------------------


def _is_failed_result(entry: Entry) -> bool:
    metadata = entry.metadata or {}
    if metadata.get("is_error") is True or metadata.get("status") in ("error", "failed"):
        return True
    if isinstance(entry.content, list) and any(isinstance(b, dict) and b.get("is_error") for b in entry.content):
        return True
    return bool(_ERROR_START.match(entry_body(entry)))


def _first_line(text: str, limit: int = 200) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:limit]


@dataclass
class ChapterState:
    """What a chapter reads against: every open and done item so far, by id."""

    levels: Levels
    new_atoms: list[dict[str, Any]] = field(default_factory=list)

    def item(self, item_id: str) -> dict[str, Any] | None:
        return next((a for a in self.new_atoms if a["id"] == item_id), None) or self.levels.find(item_id)

    def open_items(self) -> list[dict[str, Any]]:
        seen = {a["id"] for a in self.new_atoms}
        return [a for a in self.levels.open_items() if a["id"] not in seen] + [
            a for a in self.new_atoms if a["kind"] in OPEN_KINDS and a["status"] == "open"
        ]

    def done_items(self) -> list[dict[str, Any]]:
        seen = {a["id"] for a in self.new_atoms}
        return [a for a in self.levels.done_items() if a["id"] not in seen] + [
            a for a in self.new_atoms if a["kind"] in OPEN_KINDS and a["status"] == "closed"
        ]

    def add(self, atom: dict[str, Any]) -> None:
        """Add an atom; one already known (same kind and text) is not added twice."""
        if self.item(atom["id"]) is None:
            self.new_atoms.append(atom)

    def close(self, item_id: str, *, by: dict[str, Any]) -> bool:
        """Close an open item, only on evidence that holds (`by["verified"]`)."""
        item = self.item(item_id)
        if item is None or item["status"] != "open" or not by.get("verified"):
            return False
        item["status"] = "closed"
        item["closed_by"] = {"text": by["text"], "evidence": by["evidence"], "verified": True}
        return True

    def reopen(self, item_id: str, *, by: dict[str, Any]) -> bool:
        item = self.item(item_id)
        if item is None or item["status"] != "closed" or not by.get("verified"):
            return False
        item["status"] = "open"
        item["reopened_by"] = {"text": by["text"], "evidence": by["evidence"], "verified": True}
        item.pop("closed_by", None)
        return True


def entry_atoms(entries: Iterable[Entry], calls: dict[str, tuple[str, str]], state: ChapterState) -> None:
    """Atoms read with no model: task lines, checked-off lines, failed tool calls, files worked on."""
    for entry in entries:
        body = entry_body(entry)
        if entry.type == EntryType.MESSAGE and entry.role in (Role.USER, Role.ASSISTANT):
            for match in _TASK_LINE.finditer(body):
                text = (match.group("todo") or match.group("box") or "").strip()
                quote = match.group(0).strip()
                state.add(
                    make_atom(
                        kind="task",
                        status="open",
                        text=text,
                        evidence=[{"entry_id": entry.id, "quote": quote}],
                        verified=quote_holds(quote, entry),
                        source="entries",
                    )
                )
            for match in _DONE_LINE.finditer(body):
                quote = match.group(0).strip()
                by = {
                    "text": match.group("done"),
                    "evidence": [{"entry_id": entry.id, "quote": quote}],
                    "verified": quote_holds(quote, entry),
                }
                state.close(atom_id("task", match.group("done")), by=by)
            for call in entry.tool_calls or []:
                arguments = call.get("arguments") if isinstance(call, dict) else None
                if not isinstance(arguments, dict):
                    continue
                for key in _FILE_KEYS:
                    path = arguments.get(key)
                    if isinstance(path, str) and path.strip():
                        quote = path.strip()
                        state.add(
                            make_atom(
                                kind="file",
                                status="open",
                                text=quote,
                                evidence=[{"entry_id": entry.id, "quote": quote}],
                                verified=quote_holds(quote, entry),
                                source="entries",
                            )
                        )
        elif entry.type == EntryType.TOOL_RESULT or entry.role == Role.TOOL:
            name = tool_name_of(entry, calls)
            line = _first_line(body)
            if not line:
                continue
            evidence = [{"entry_id": entry.id, "quote": line}]
            holds = quote_holds(line, entry)
            if _is_failed_result(entry):
                state.add(
                    make_atom(
                        kind="error",
                        status="open",
                        text=f"{name} failed: {line}",
                        evidence=evidence,
                        verified=holds,
                        source="entries",
                    )
                )
            else:
                # A later call of the same tool that worked resolves its failures found without a model.
                for item in state.open_items():
                    if (
                        item["kind"] == "error"
                        and item.get("source") == "entries"
                        and item["text"].startswith(f"{name} failed:")
                    ):
                        state.close(item["id"], by={"text": f"{name} worked", "evidence": evidence, "verified": holds})


# --- atoms from the model ----------------------------------------------------------------------------------


@dataclass
class Chapter:
    entries: list[Entry]
    before: list[Entry]


def split_chapters(entries: list[Entry], chapter_tokens: int) -> list[Chapter]:
    """Chapters of about `chapter_tokens`, each opening with the end of the one before."""
    chapters: list[Chapter] = []
    current: list[Entry] = []
    used = 0
    for entry in entries:
        tokens = entry_tokens(entry)
        if current and used + tokens > chapter_tokens:
            chapters.append(Chapter(entries=current, before=[]))
            current, used = [], 0
        current.append(entry)
        used += tokens
    if current:
        chapters.append(Chapter(entries=current, before=[]))
    for previous, chapter in itertools.pairwise(chapters):
        tail: list[Entry] = []
        budget = max(chapter_tokens // 8, 1)
        for entry in reversed(previous.entries):
            if tail and sum(entry_tokens(e) for e in tail) + entry_tokens(entry) > budget:
                break
            tail.insert(0, entry)
        chapter.before = tail[-3:]
    return chapters


def _items_listing(items: list[dict[str, Any]]) -> str:
    return "\n".join(f"[{a['id']}] {a['kind']}: {a['text']}" for a in items) or "(none)"


def chapter_request(
    chapter: Chapter, calls: dict[str, tuple[str, str]], state: ChapterState, extra_prompt: str
) -> tuple[str, str, dict[int, Entry]]:
    """(system prompt, numbered transcript, number -> entry) for one chapter."""
    numbered: dict[int, Entry] = {}
    lines = []
    number = 0
    for entry in chapter.before:
        number += 1
        numbered[number] = entry
        lines.append(entry_line(entry, calls, prefix=f"[{number}] (before) "))
    for entry in chapter.entries:
        number += 1
        numbered[number] = entry
        lines.append(entry_line(entry, calls, prefix=f"[{number}] "))
    system = prompt(HIERARCHICAL).render(
        open_items=_items_listing(state.open_items()), done_items=_items_listing(state.done_items())
    )
    if extra_prompt:
        system += "\n\n" + extra_prompt
    return system, "\n\n".join(lines), numbered


def _checked_evidence(raw: Any, numbered: dict[int, Entry]) -> tuple[list[dict[str, str]], bool]:
    """The atom's quotes mapped to entries, and whether every one holds (at least one needed)."""
    evidence: list[dict[str, str]] = []
    holds = True
    for quote in raw if isinstance(raw, list) else []:
        if not isinstance(quote, dict) or not isinstance(quote.get("quote"), str) or not quote["quote"].strip():
            holds = False
            continue
        entry: Entry | None = None
        ref = quote.get("message", quote.get("n"))
        if isinstance(ref, str) and ref.strip().lstrip("[").rstrip("]").isdigit():
            ref = int(ref.strip().lstrip("[").rstrip("]"))
        if isinstance(ref, int) and not isinstance(ref, bool):
            entry = numbered.get(ref)
        elif isinstance(quote.get("entry_id"), str):
            entry = next((e for e in numbered.values() if e.id == quote["entry_id"]), None)
        text = quote["quote"].strip()
        if entry is None or not quote_holds(text, entry):
            holds = False
        if entry is not None:
            evidence.append({"entry_id": entry.id, "quote": text})
    return evidence, holds and bool(evidence)


def apply_model_atoms(elements: list[Any], numbered: dict[int, Entry], state: ChapterState) -> int:
    """Check and apply the model's atoms; returns how many were left out as not atoms."""
    left_out = 0
    for element in elements:
        if not isinstance(element, dict):
            left_out += 1
            continue
        kind = KIND_ALIASES.get(str(element.get("kind") or "").lower(), str(element.get("kind") or "").lower())
        text = element.get("text")
        if kind not in ATOM_KINDS or not isinstance(text, str) or not text.strip():
            left_out += 1
            continue
        status = str(element.get("status") or "open").lower()
        status = status if status in ("open", "closed") else "open"
        evidence, verified = _checked_evidence(element.get("evidence"), numbered)
        atom = make_atom(
            kind=kind, status=status, text=text.strip(), evidence=evidence, verified=verified, source="model"
        )
        closes, reopens = element.get("closes"), element.get("reopens")
        if isinstance(closes, str) and closes:
            state.close(closes, by=atom)
            continue
        if isinstance(reopens, str) and reopens:
            state.reopen(reopens, by=atom)
            continue
        known = state.item(atom["id"])
        if known is not None:
            # Said again: its state changes only on evidence that holds.
            if status == "closed" and known["status"] == "open":
                state.close(known["id"], by=atom)
            continue
        if status == "closed" and kind in OPEN_KINDS and not verified:
            atom["status"] = "open"  # done only on evidence that holds
        state.add(atom)
    return left_out


def _ask(system: str, transcript: str, options: HierarchicalOptions) -> ArrayAnswer:
    return ask_for_array(
        system=system,
        user="Chapter transcript:\n\n" + transcript,
        max_tokens=options.atoms_max_tokens,
        timeout=options.summarizer_timeout,
        record=False,
        model=model_named(options.summarizer_model),
    )


def hierarchical_plan(ctx: CompactionContext) -> CompactionPlan | None:
    """Read the new entries in chapters of atoms and write the tree and its handoff.

    1. Previous levels: those of the newest compaction on the branch that has them.
    2. The kept tail: the newest `keep_recent_tokens` in whole turns (else `keep_recent` entries,
       tool-safe); the entries before it that the view still shows are read (an earlier
       non-hierarchical summary is read as the first of them).
    3. Chapters of about `chapter_tokens`, each opening with the end of the one before; for each,
       atoms without a model (task lines, checked-off lines, failed tool calls, files), then,
       when a model exists, its JSON array of atoms (up to three tries, cut answers continued),
       every quote checked; open items close or reopen only on evidence that holds.
    4. New chapters join the levels; chapters fold into arcs and arcs into the saga.
    5. Refuse (409) when an open item of the previous levels was lost.
    6. The content is the handoff, its sections in a fixed order.
    """

    options: HierarchicalOptions = ctx.options
    previous_event = next(
        (c.event for c in reversed(ctx.compactions) if isinstance(c.event, dict) and c.event.get("levels")), None
    )
    previous = Levels.from_event((previous_event or {}).get("levels"))
    levels = Levels.from_event((previous_event or {}).get("levels"))
    entries = ctx.view.entries
    if options.keep_recent_tokens is not None:
        cut = cut_keeping_recent_tokens(entries, options.keep_recent_tokens)
    else:
        cut = find_cut_point(entries, options.keep_recent)
    to_read = list(entries[:cut])
    if not to_read:
        return None
    newest = ctx.compactions[-1] if ctx.compactions else None
    if ctx.view.summary and newest is not None and not (newest.event or {}).get("levels"):
        to_read.insert(0, newest)  # an earlier plain summary: read it, quotes may cite it
    calls = tool_call_names(ctx.branch)
    chapters = split_chapters(to_read, max(options.chapter_tokens, 200))
    use_model = model_available()
    if not use_model:
        ctx.notes.append(
            "no language model is configured: chapters were read without one (task lines, failed tool calls, files)"
        )
    left_out = 0
    failed_chapters = 0
    concurrency = max(options.chapter_concurrency, 1)
    state = ChapterState(levels=levels)
    new_nodes: list[dict[str, Any]] = []
    for start in range(0, len(chapters), concurrency):
        batch = chapters[start : start + concurrency]
        # Requests of a batch see the open items known before it (004 chapterConcurrency).
        requests = [chapter_request(ch, calls, state, options.prompt) for ch in batch]
        answers: list[ArrayAnswer | Exception | None] = [None] * len(batch)
        if use_model:
            if len(batch) == 1:
                try:
                    answers[0] = _ask(requests[0][0], requests[0][1], options)
                except NoArrayError as exc:
                    answers[0] = exc
            else:
                with ThreadPoolExecutor(max_workers=len(batch)) as pool:
                    futures = [pool.submit(_ask, system, transcript, options) for system, transcript, _ in requests]
                    for index, future in enumerate(futures):
                        try:
                            answers[index] = future.result()
                        except NoArrayError as exc:
                            answers[index] = exc
        for chapter, (_, _, numbered), answer in zip(batch, requests, answers, strict=True):
            before = len(state.new_atoms)
            entry_atoms([e for e in chapter.entries if e.type != EntryType.COMPACTION], calls, state)
            if isinstance(answer, ArrayAnswer):
                for usage in answer.usages:
                    record_usage(usage)
                left_out += answer.malformed + apply_model_atoms(answer.elements, numbered, state)
            elif isinstance(answer, Exception):
                failed_chapters += 1
            new_nodes.append(
                {"from": chapter.entries[0].id, "to": chapter.entries[-1].id, "atoms": state.new_atoms[before:]}
            )
    if failed_chapters:
        ctx.notes.append(f"{failed_chapters} chapter(s) had no JSON array after three tries: read without a model")
    levels.chapters.extend(new_nodes)
    fold_levels(levels, chapters_per_arc=options.chapters_per_arc, arcs_per_saga=options.arcs_per_saga)
    lost = dropped_open_items(previous, levels)
    if lost:
        raise Conflict(
            "summary_drops_open_items",
            f"The new summary would drop {len(lost)} open item(s) of the previous one; nothing was written.",
        )
    content = handoff_text(levels)
    kept = entries[cut:]
    covered = {e.id for e in to_read if e.type != EntryType.COMPACTION}
    for atom in levels.atoms():
        covered.update(q["entry_id"] for q in atom.get("evidence", []) if q.get("entry_id"))
    covered &= {e.id for e in ctx.branch if e.type != EntryType.COMPACTION}
    return CompactionPlan(
        strategy=NAME,
        content=content,
        first_kept_entry_id=kept[0].id if kept else None,
        first_kept_seq=kept[0].seq if kept else None,
        summary=content,
        tokens_before=history_tokens(ctx.view),
        tokens_after=count_message_tokens(content) + sum(entry_tokens(e) for e in kept),
        prompt_version=HIERARCHICAL if use_model else "",
        levels=levels.as_event(),
        covered_ids=covered,
        details={
            "chapters_read": len(chapters),
            "atoms_left_out": left_out,
            "open_items": len(levels.open_items()),
            **({"summarizer_model": options.summarizer_model} if use_model and options.summarizer_model else {}),
        },
    )
