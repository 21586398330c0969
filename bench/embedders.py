"""Bench: the bundled local embedding models side by side, on the same texts, same run.

    python bench/embedders.py [--texts 1024] [--rounds 2] [--locomo FILE]
                              [--models all-MiniLM-L6-v2,all-MiniLM-L6-v2-int8,all-MiniLM-L6-v2-q8,multilingual-e5-small-q4]

Each round runs every model in a fresh process of its own (EMBEDDER=local, EMBEDDING_MODEL=the
model, EMBEDDING_THREADS as configured, 1 by default as in a worker), one after the other, so the
models share the machine's load; in that process:
  - load: the model loaded as a worker's parent loads it (memoryapp.search.embedders), and the
    process's resident memory (VmRSS, /proc/self/status) before and after;
  - documents: `embed_texts` of the texts in batches of EMBEDDING_BATCH_SIZE (the embedding job's
    calls), texts/s by the clock and per CPU second of the process;
  - queries: `embed_query` of 100 short questions one at a time (a search's call), ms each by CPU;
  - the peak resident memory (VmHWM) after all of it.
The texts are turns of a LoCoMo file (`--locomo`) or made-up turns, long and short mixed. Prints the
medians of the rounds and each model's ratios to the first; for a variant of the first (its name
begins with the first's: all-MiniLM-L6-v2-int8, -q8), the cosine of each text's two vectors (min, 1st
percentile, median), which says whether it is the same model. It never asserts a duration.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

LONG = (
    "We planned the garden this weekend: tomatoes along the south fence, basil and thyme in pots by "
    "the kitchen door, and the compost heap moved behind the shed so it gets less sun in July.",
    "My knee started hurting again after the long run on Sunday, so the physio said to put the "
    "marathon training on hold for two weeks and swim instead, with a check-up on the 14th.",
    "The bank wrote that the mortgage rate goes up in March; before we decide anything we should "
    "compare it with what the savings account earns and ask whether an early repayment is free.",
)
SHORT = ("Yes, last May!", "Sounds good.", "No, the other one.", "Thanks!", "Which day again?", "Ok, done.")
QUESTIONS = ("When did she go to the museum?", "What pet does he have?", "Where does my sister live?")


def bench_texts(count: int, locomo: str) -> list[str]:
    if locomo:
        turns: list[str] = []
        for sample in json.loads(Path(locomo).read_text()):
            conversation = sample["conversation"]
            for key in sorted(k for k in conversation if k.startswith("session_") and k[8:].isdigit()):
                turns.extend(str(turn.get("text") or "") for turn in conversation[key])
        return [t for t in turns if t][:count]
    rng = random.Random(7)
    return [rng.choice(LONG) if rng.random() < 0.5 else rng.choice(SHORT) for _ in range(count)]


def memory_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def child(texts_file: str, vectors_file: str) -> None:
    """One model, one round, in this process: prints one JSON line."""
    import django

    django.setup()
    from django.conf import settings

    from memoryapp.search import embedders

    texts = json.loads(Path(texts_file).read_text())
    before = memory_kb("VmRSS")
    began, cpu = time.perf_counter(), time.process_time()
    embedders._load_local_model()
    load_s, load_cpu = time.perf_counter() - began, time.process_time() - cpu
    loaded = memory_kb("VmRSS")
    embedders.local_model_warm()

    began, cpu = time.perf_counter(), time.process_time()
    vectors: list[list[float]] = []
    for start in range(0, len(texts), settings.EMBEDDING_BATCH_SIZE):
        vectors.extend(embedders.embed_texts(texts[start : start + settings.EMBEDDING_BATCH_SIZE]))
    wall, spent = time.perf_counter() - began, time.process_time() - cpu
    if vectors_file:
        Path(vectors_file).write_text(json.dumps(vectors))

    questions = [f"{QUESTIONS[i % len(QUESTIONS)]} ({i})" for i in range(100)]
    cpu = time.process_time()
    for question in questions:
        embedders.embed_query(question)
    query_ms = (time.process_time() - cpu) * 1000 / len(questions)
    print(
        json.dumps(
            {
                "load_s": load_s,
                "load_cpu": load_cpu,
                "rss_before_mb": before / 1024,
                "rss_loaded_mb": loaded / 1024,
                "rss_peak_mb": memory_kb("VmHWM") / 1024,
                "texts_per_s": len(texts) / wall,
                "texts_per_cpu_s": len(texts) / spent,
                "cpu_s": spent,
                "query_cpu_ms": query_ms,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--texts", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--locomo", default="")
    parser.add_argument(
        "--models", default="all-MiniLM-L6-v2,all-MiniLM-L6-v2-int8,all-MiniLM-L6-v2-q8,multilingual-e5-small-q4"
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--vectors", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.vectors)
        return

    texts = bench_texts(args.texts, args.locomo)
    texts_file = ROOT / "var" / f"bench-embedders-{os.getpid()}.json"
    texts_file.parent.mkdir(exist_ok=True)
    texts_file.write_text(json.dumps(texts))
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    print(f"{len(texts)} texts ({sum(map(len, texts)) / len(texts):.0f} characters on average), {args.rounds} rounds")
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in models}
    vectors_files = {m: texts_file.with_suffix(f".{m}.vectors.json") for m in models}
    try:
        for round_number in range(args.rounds):
            for model in models:
                env = {
                    **os.environ,
                    "DJANGO_SETTINGS_MODULE": "memory_project.settings",
                    "EMBEDDER": "local",
                    "EMBEDDING_MODEL": model,
                    "HF_HUB_OFFLINE": "1",
                }
                done = subprocess.run(
                    [sys.executable, __file__, "--child", str(texts_file)]
                    + (["--vectors", str(vectors_files[model])] if round_number == 0 else []),
                    env=env,
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs[model].append(json.loads(done.stdout.strip().splitlines()[-1]))
        first = json.loads(vectors_files[models[0]].read_text())
        cosines = {
            model: sorted(
                sum(x * y for x, y in zip(a, b, strict=True))
                for a, b in zip(first, json.loads(vectors_files[model].read_text()), strict=True)
            )
            for model in models[1:]
            if model.startswith(models[0])
        }
    finally:
        texts_file.unlink(missing_ok=True)
        for path in vectors_files.values():
            path.unlink(missing_ok=True)

    medians = {m: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for m, rows in runs.items()}
    for model, row in medians.items():
        print(
            f"  {model:26s} documents {row['texts_per_s']:7.1f} texts/s ({row['texts_per_cpu_s']:7.1f} per CPU s)"
            f"  query {row['query_cpu_ms']:5.1f} CPU ms  load {row['load_s']:5.1f} s ({row['load_cpu']:4.1f} CPU s)"
            f"  RSS +{row['rss_loaded_mb'] - row['rss_before_mb']:5.0f} MB loaded, peak {row['rss_peak_mb']:5.0f} MB"
        )
    base = medians[models[0]]
    for model in models[1:]:
        other = medians[model]
        print(
            f"  {model} / {models[0]}: documents per CPU s x{other['texts_per_cpu_s'] / base['texts_per_cpu_s']:.2f},"
            f" query CPU x{other['query_cpu_ms'] / base['query_cpu_ms']:.2f},"
            f" peak RSS x{other['rss_peak_mb'] / base['rss_peak_mb']:.2f}"
        )
    for model, values in cosines.items():
        print(
            f"  cosine of each text's {model} and {models[0]} vectors: min {values[0]:.4f},"
            f" 1st percentile {values[len(values) // 100]:.4f}, median {statistics.median(values):.4f}"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
