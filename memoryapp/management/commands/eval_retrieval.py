"""python manage.py eval_retrieval --locomo FILE [--k 5,10,25,50] [--methods keyword,vector,hybrid]
                                   [--channels all] [--conversations conv-41,conv-42] [--json]
                                   [--graph-channels] [--vector-cache FILE] [--questions-out FILE]
   python manage.py eval_retrieval --longmemeval FILE [--k ...] [--methods ...] [--channels ...]
                                   [--questions ID,ID] [--limit N] [--json]

Retrieval evaluation on a LoCoMo-format file, through the product's own search selector (below),
or on a LongMemEval file: each question's haystack a thread, its `has_answer` turns the evidence,
turn recall@k and session recall_all@k per question type (memoryapp.management.longmemeval).

1. Index: each conversation goes into a fresh agent as one thread of entries, turn by turn
   (sender_name = speaker, metadata.dia_id kept, created_at from the session's date, an image's
   caption as part of the turn), then embedded by the configured embedder (the embedding job's
   service). Only `conversation` is read here: questions and evidence are not looked at.
2. Ask: every question with evidence goes through `search(...)` (the selector POST /search
   uses), scoped to that thread, once per method, for the largest k; and once per turn channel
   of `--channels` (the registered channels, memoryapp.search.channels) that no method names:
   that channel alone, its own order (no neighbours, no MMR), so each channel's worth shows next
   to the fusion (`keyword` and `vector` are their channels alone; `hybrid` fuses them all).
3. Score: recall@k = |evidence ∩ dia_ids of the top k| / |evidence|, averaged over the
   questions (malformed evidence ids such as "D8:6; D9:17" are split on ';'), overall and per
   category; search latency p50 / p95 (the query's embedding time is shown apart). With
   `--questions-out FILE` (LoCoMo), each question's row of each method as one JSON line: the
   conversation, question, category, kind of question, evidence, the dia_ids of the page in order,
   and each channel's own list before the fusion (dia_ids, best first): which channel finds a missed
   evidence turn, and how deep, picks the next method by evidence.
4. Clean up: the agents made for the run are deleted, with their threads and entries.
"""

from __future__ import annotations

import json
import re
import statistics
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from memory_project.commands import ProjectCommand
from memoryapp.agents.services import agent_get_or_create
from memoryapp.graph.names import graph_from_names
from memoryapp.management.longmemeval import longmemeval_run
from memoryapp.management.vector_cache import CachedEmbedder
from memoryapp.models import Agent, Entry, Thread
from memoryapp.screening.policy import ALLOW
from memoryapp.screening.recognizers import CATEGORIES as SCREENING_CATEGORIES
from memoryapp.search.channel_set import channel_names
from memoryapp.search.channels import ENTRY
from memoryapp.search.embedders import embedder_wrapped, query_cache_clear
from memoryapp.search.indexing import embed_pending
from memoryapp.search.retrieval import METHODS, search
from memoryapp.threads.services import entries_add, thread_create

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_SESSION = re.compile(r"^session_(\d+)$")


def session_date(text: str | None) -> datetime | None:
    if not text:
        return None
    for pattern in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B %Y"):
        try:
            return datetime.strptime(text.strip(), pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def turn_text(turn: dict[str, Any]) -> str:
    text = str(turn.get("text") or "").strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def evidence_ids(raw: Any) -> set[str]:
    found: set[str] = set()
    for item in raw or []:
        for piece in str(item).split(";"):
            piece = piece.strip()
            if piece:
                found.add(piece)
    return found


def search_runs(methods: list[str], channels: str) -> dict[str, dict[str, Any]]:
    """What each row of the tables runs: the search arguments of a method, or of a turn channel alone."""
    runs: dict[str, dict[str, Any]] = {m: {"method": m} for m in methods if m != "hybrid"}
    names = channel_names(ENTRY)
    wanted = [] if channels.strip() in ("", "none") else names if channels.strip() == "all" else []
    if channels.strip() not in ("", "none", "all"):
        wanted = [c.strip() for c in channels.split(",") if c.strip()]
        for name in wanted:
            if name not in names:
                raise CommandError(f"unknown channel {name!r}: one of {', '.join(names)}")
    for name in wanted:
        if name not in runs:
            runs[name] = {"method": "hybrid", "channels": (name,), "neighbours": False, "diversify": False}
    if "hybrid" in methods:
        runs["hybrid"] = {"method": "hybrid"}
    return runs


def eval_agent() -> Agent:
    """An agent made for the run, screening nothing: a benchmark's turns are stored as they are (the
    default policy refuses a turn quoting an API key, and LongMemEval's haystacks hold some), so
    every turn is indexed and the evidence ids stay where the file puts them."""
    agent, _ = agent_get_or_create(slug=f"eval-{uuid.uuid4().hex[:12]}")
    Agent.objects.filter(pk=agent.pk).update(screening={category: ALLOW for category in SCREENING_CATEGORIES})
    agent.refresh_from_db()
    return agent


def percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


class Command(ProjectCommand):
    help = "Recall@k of keyword, vector and hybrid search on a LoCoMo-format or a LongMemEval file."

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--locomo", help="a LoCoMo-format JSON file")
        source.add_argument("--longmemeval", help="a LongMemEval JSON file (longmemeval_s, _m or _oracle)")
        parser.add_argument("--k", default="5,10,25,50")
        parser.add_argument("--methods", default="keyword,vector,hybrid")
        parser.add_argument(
            "--channels",
            default="all",
            help="turn channels to also score alone (comma separated, 'all' or 'none'); keyword and vector are methods",
        )
        parser.add_argument("--conversations", default="", help="LoCoMo: only these sample_ids (comma separated)")
        parser.add_argument("--questions", default="", help="LongMemEval: only these question_ids (comma separated)")
        parser.add_argument("--limit", type=int, default=0, help="LongMemEval: only the first N questions")
        parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
        parser.add_argument(
            "--graph-channels",
            action="store_true",
            help="switch the search's graph channels on (SEARCH_GRAPH_CHANNELS) for the fused rows",
        )
        parser.add_argument(
            "--questions-out",
            default="",
            help="LoCoMo: write each question's ranked turns and channel lists to this file (JSON lines)",
        )
        parser.add_argument(
            "--vector-cache",
            default="",
            help="a SQLite file of the turns' vectors, kept across runs (memoryapp.management.vector_cache)",
        )

    def execute(self, *args: Any, **options: Any) -> str | None:
        if not options.get("graph_channels"):
            return self._execute(*args, **options)
        # On for this run only: the process may go on (call_command in a test, a shell).
        before = settings.SEARCH_GRAPH_CHANNELS
        settings.SEARCH_GRAPH_CHANNELS = True
        try:
            return self._execute(*args, **options)
        finally:
            settings.SEARCH_GRAPH_CHANNELS = before

    def _execute(self, *args: Any, **options: Any) -> str | None:
        cache_path = options.get("vector_cache") or ""
        if not cache_path:
            return super().execute(*args, **options)
        with embedder_wrapped(lambda inner: CachedEmbedder(inner, Path(cache_path))):
            return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:

        path = Path(options["locomo"] or options["longmemeval"])
        if not path.is_file():
            raise CommandError(f"no file {path}")
        try:
            ks = sorted({int(k) for k in str(options["k"]).split(",") if k.strip()})
        except ValueError as exc:
            raise CommandError("--k takes numbers separated by commas") from exc
        if not ks or ks[0] < 1:
            raise CommandError("--k takes positive numbers")
        methods = [m.strip() for m in str(options["methods"]).split(",") if m.strip()]
        for method in methods:
            if method not in METHODS:
                raise CommandError(f"unknown method {method!r}: one of {', '.join(METHODS)}")
        runs = search_runs(methods, str(options["channels"]))
        methods = list(runs)
        if options["longmemeval"]:
            if options.get("questions_out"):
                raise CommandError("--questions-out reads a LoCoMo file (--locomo)")
            self._longmemeval(path, ks, runs, options)
            return
        wanted = {c.strip() for c in str(options["conversations"]).split(",") if c.strip()}
        samples = json.loads(path.read_text())
        if not isinstance(samples, list):
            raise CommandError("a LoCoMo file is a JSON list of conversations")
        if wanted:
            samples = [s for s in samples if s.get("sample_id") in wanted]
        quiet = options["json"]
        log = (lambda _msg: None) if quiet else (lambda msg: self.stdout.write(msg))

        recalls: dict[str, dict[int, list[float]]] = {m: defaultdict(list) for m in methods}
        by_category: dict[str, dict[str, dict[int, list[float]]]] = {
            m: defaultdict(lambda: defaultdict(list)) for m in methods
        }
        latency: dict[str, list[float]] = {m: [] for m in methods}
        embed_ms: dict[str, list[float]] = {m: [] for m in methods}
        agents: list[Agent] = []
        out_path = str(options.get("questions_out") or "")
        rows_out: list[dict[str, Any]] | None = [] if out_path else None
        try:
            for number, sample in enumerate(samples, start=1):
                started = time.perf_counter()
                agent, thread, dia_of = self._index(sample["conversation"])  # never reads `qa`
                agents.append(agent)
                log(
                    f"[{number}/{len(samples)}] {sample.get('sample_id')}: {len(dia_of)} turns indexed "
                    f"in {time.perf_counter() - started:.1f}s"
                )
                self._ask(
                    sample.get("qa") or [],
                    agent,
                    thread,
                    dia_of,
                    runs,
                    ks,
                    recalls,
                    by_category,
                    latency,
                    embed_ms,
                    rows_out=rows_out,
                    sample_id=str(sample.get("sample_id") or ""),
                )
        finally:
            for agent in agents:
                Agent.objects.filter(pk=agent.pk).delete()
        if rows_out is not None:
            Path(out_path).write_text("".join(json.dumps(row) + "\n" for row in rows_out))

        summary: dict[str, dict[str, float]] = {}
        for method in methods:
            row: dict[str, float] = {}
            for k in ks:
                values = recalls[method][k]
                row[f"recall@{k}"] = round(100 * statistics.fmean(values), 1) if values else 0.0
            row["p50_ms"] = round(percentile(latency[method], 0.5), 1)
            row["p95_ms"] = round(percentile(latency[method], 0.95), 1)
            row["embed_p50_ms"] = round(percentile(embed_ms[method], 0.5), 1)
            row["questions"] = len(recalls[method][ks[0]])
            summary[method] = row
        if not quiet:
            self._table(summary, by_category, methods, ks)
        else:
            self.stdout.write(json.dumps(summary))

    # --- LongMemEval ----------------------------------------------------------------------------

    def _longmemeval(self, path: Path, ks: list[int], runs: dict[str, dict[str, Any]], options: dict[str, Any]) -> None:
        try:
            questions = json.loads(path.read_text())
        except ValueError as exc:
            raise CommandError(f"{path} is not JSON: {exc}") from exc
        if not isinstance(questions, list) or not all(isinstance(q, dict) for q in questions):
            raise CommandError("a LongMemEval file is a JSON list of questions")
        wanted = {q.strip() for q in str(options["questions"]).split(",") if q.strip()}
        if wanted:
            questions = [q for q in questions if str(q.get("question_id")) in wanted]
        if options["limit"]:
            questions = questions[: options["limit"]]
        quiet = options["json"]
        log = (lambda _msg: None) if quiet else (lambda msg: self.stdout.write(msg))
        agent = eval_agent()
        try:
            summary, per_type = longmemeval_run(agent=agent, questions=questions, runs=runs, ks=ks, log=log)
        finally:
            Agent.objects.filter(pk=agent.pk).delete()
        if quiet:
            self.stdout.write(json.dumps({"summary": summary, "by_type": per_type}))
            return
        head = "method".ljust(10) + "".join(f"T@{k}".rjust(8) for k in ks) + "".join(f"S-all@{k}".rjust(10) for k in ks)
        self.stdout.write(head + "   p50 ms   p95 ms  (turn questions / session questions)")
        methods = list(runs)
        for method in methods:
            row = summary[method]
            self.stdout.write(
                method.ljust(10)
                + "".join(f"{row[f'turn_recall@{k}']:8.1f}" for k in ks)
                + "".join(f"{row[f'session_recall_all@{k}']:10.1f}" for k in ks)
                + f"{row['p50_ms']:9.1f}{row['p95_ms']:9.1f}  ({row['questions_turn']:.0f} / {row['questions_session']:.0f})"
            )
        self.stdout.write("")
        self.stdout.write(
            "per question type (questions): "
            + ", ".join(f"T@{k}" for k in ks)
            + " | "
            + ", ".join(f"S-all@{k}" for k in ks)
        )
        for method in methods:
            for kind, row in per_type[method].items():
                turns = " ".join(f"{row[f'turn_recall@{k}']:5.1f}" for k in ks)
                sessions = " ".join(f"{row[f'session_recall_all@{k}']:5.1f}" for k in ks)
                count = max(row["questions_turn"], row["questions_session"])
                self.stdout.write(f"  {method:<8} {kind:<26} ({count:4.0f})  {turns} | {sessions}")

    # --- 1. index (the conversation only) ---------------------------------------------------

    def _index(self, conversation: dict[str, Any]) -> tuple[Agent, Thread, dict[str, str]]:

        agent = eval_agent()
        thread = thread_create(agent=agent, external_id="locomo")
        speaker_a = conversation.get("speaker_a")
        sessions = sorted(
            (int(m.group(1)), key)
            for key in conversation
            if (m := _SESSION.match(key)) and isinstance(conversation[key], list)
        )
        specs: list[dict[str, Any]] = []
        clock = datetime(2020, 1, 1, tzinfo=UTC)
        for number, key in sessions:
            start = session_date(conversation.get(f"{key}_date_time")) or clock
            clock = max(clock, start)
            for turn in conversation[key]:
                text = turn_text(turn)
                if not text:
                    continue
                clock += timedelta(seconds=30)
                speaker = str(turn.get("speaker") or "")
                specs.append(
                    {
                        "role": "user" if speaker == speaker_a else "assistant",
                        "content": text,
                        "sender_name": speaker,
                        "metadata": {"dia_id": turn.get("dia_id"), "session": number},
                        "created_at": clock,
                    }
                )
        for offset in range(0, len(specs), 500):
            entries_add(thread=thread, entries=specs[offset : offset + 500])
        embed_pending(agent_id=agent.pk)
        # No model reads the conversation here, so no items or edges exist: the rule-based graph (who
        # names whom, each edge quoting its turn; memoryapp.graph.names) gives the graph channels
        # something to walk, as documented in docs/benchmarks.md.
        graph_from_names(thread=thread, actor="eval_retrieval")
        dia_of = {
            entry_id: str((metadata or {}).get("dia_id") or "")
            for entry_id, metadata in Entry.objects.filter(thread=thread).values_list("id", "metadata")
        }
        return agent, thread, dia_of

    # --- 2. and 3. ask and score -----------------------------------------------------------------

    def _ask(
        self,
        questions: list[dict[str, Any]],
        agent: Agent,
        thread: Thread,
        dia_of: dict[str, str],
        runs: dict[str, dict[str, Any]],
        ks: list[int],
        recalls: dict[str, dict[int, list[float]]],
        by_category: dict[str, dict[str, dict[int, list[float]]]],
        latency: dict[str, list[float]],
        embed_ms: dict[str, list[float]],
        *,
        rows_out: list[dict[str, Any]] | None = None,
        sample_id: str = "",
    ) -> None:

        for qa in questions:
            evidence = evidence_ids(qa.get("evidence"))
            if not evidence:
                continue
            category = CATEGORIES.get(int(qa.get("category") or 0), str(qa.get("category")))
            for method, run in runs.items():
                query_cache_clear()  # each method pays for its own query embedding
                started = time.perf_counter()
                outcome = search(
                    agent=agent,
                    text=str(qa.get("question") or ""),
                    thread=thread,
                    kinds=("entries",),
                    limit=max(ks),
                    **run,
                )
                elapsed = (time.perf_counter() - started) * 1000
                latency[method].append(elapsed - outcome.embed_ms)
                embed_ms[method].append(outcome.embed_ms)
                ranked = [dia_of.get(hit.id, "") for hit in outcome.hits]
                for k in ks:
                    found = len(evidence & set(ranked[:k])) / len(evidence)
                    recalls[method][k].append(found)
                    by_category[method][category][k].append(found)
                if rows_out is not None:
                    rows_out.append(
                        {
                            "conversation": sample_id,
                            "question": str(qa.get("question") or ""),
                            "category": category,
                            "kind": outcome.analysis.kind if outcome.analysis is not None else "",
                            "method": method,
                            "evidence": sorted(evidence),
                            "ranked": ranked,
                            "channels": {
                                f"{kind}:{name}": [dia_of.get(i, "") for i in ids]
                                for (kind, name), ids in outcome.channel_lists.items()
                                if kind == ENTRY
                            },
                        }
                    )

    def _table(
        self,
        summary: dict[str, dict[str, float]],
        by_category: dict[str, dict[str, dict[int, list[float]]]],
        methods: list[str],
        ks: list[int],
    ) -> None:
        head = (
            "method".ljust(10) + "".join(f"R@{k}".rjust(8) for k in ks) + "   p50 ms   p95 ms  (query embedding p50 ms)"
        )
        self.stdout.write(head)
        for method in methods:
            row = summary[method]
            self.stdout.write(
                method.ljust(10)
                + "".join(f"{row[f'recall@{k}']:8.1f}" for k in ks)
                + f"{row['p50_ms']:9.1f}{row['p95_ms']:9.1f}  ({row['embed_p50_ms']:.1f})"
            )
        self.stdout.write("")
        self.stdout.write("per category (questions): " + ", ".join(f"R@{k}" for k in ks))
        for method in methods:
            for category in sorted(by_category[method]):
                values = by_category[method][category]
                cells = " ".join(f"{100 * statistics.fmean(values[k]):5.1f}" for k in ks)
                self.stdout.write(f"  {method:<8} {category:<12} ({len(values[ks[0]]):4d})  {cells}")
