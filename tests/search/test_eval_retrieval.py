"""eval_retrieval: recall@k of the product's search on a LoCoMo-format file."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from memoryapp.models import Agent, Entry
from memoryapp.search.channel_set import channel_names
from memoryapp.search.channels import ENTRY

LOCOMO = [
    {
        "sample_id": "tiny-1",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a golden retriever puppy called Rex."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! Does Rex like water?"},
                {"speaker": "Ana", "dia_id": "D1:3", "text": "He swims in the lake every morning."},
            ],
            "session_2_date_time": "10:00 am on 20 June, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "I started learning the cello last week."},
                {
                    "speaker": "Ana",
                    "dia_id": "D2:2",
                    "text": "Look at this!",
                    "blip_caption": "a photo of a violin on a table",
                },
            ],
        },
        "qa": [
            {"question": "What is the name of Ana's puppy?", "answer": "Rex", "evidence": ["D1:1"], "category": 4},
            {
                "question": "Which instrument is Ben learning?",
                "answer": "cello",
                "evidence": ["D2:1; D1:2"],
                "category": 1,
            },
            {"question": "What did Ana show?", "answer": "a violin", "evidence": ["D2:2"], "category": 4},
            {"question": "No evidence here", "answer": "x", "evidence": [], "category": 5},
        ],
    }
]


def test_eval_retrieval_prints_recall_per_method_as_json_and_cleans_up(tmp_path: Path, db: None) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(LOCOMO))
    agents_before = Agent.objects.count()
    out = StringIO()

    call_command("eval_retrieval", "--locomo", str(path), "--k", "1,5", "--json", stdout=out)

    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    # The methods, and each other turn channel alone (the graph's ppr and evidence among them).
    assert (
        set(summary) == {"keyword", "vector", "hybrid", *channel_names(ENTRY)} >= {"time", "entity", "ppr", "evidence"}
    )
    for row in summary.values():
        assert row["questions"] == 3
        assert 0 <= row["recall@1"] <= row["recall@5"] <= 100
        assert row["p50_ms"] >= 0 and row["p95_ms"] >= row["p50_ms"]
    # "D2:1; D1:2" counts as two evidence ids: with k=5 on 5 turns everything is found.
    assert summary["keyword"]["recall@5"] == 100.0 or summary["hybrid"]["recall@5"] == 100.0
    assert summary["keyword"]["recall@1"] > 0
    assert Agent.objects.count() == agents_before
    assert not Entry.objects.filter(metadata__has_key="dia_id").exists()


def test_eval_retrieval_prints_a_table_per_category_for_the_chosen_conversations(tmp_path: Path, db: Any) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([*LOCOMO, {**LOCOMO[0], "sample_id": "tiny-2"}]))
    out = StringIO()

    call_command(
        "eval_retrieval", "--locomo", str(path), "--methods", "keyword", "--conversations", "tiny-2", stdout=out
    )

    text = out.getvalue()
    assert "tiny-2" in text and "tiny-1" not in text
    assert "R@10" in text and "single-hop" in text and "multi-hop" in text
    assert "  time     single-hop" in text and "  entity   multi-hop" in text  # each channel alone, per category


def test_eval_retrieval_names_the_channels_it_knows(tmp_path: Path, db: Any) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(LOCOMO))
    with pytest.raises(CommandError, match="unknown channel 'graph-walk'"):
        call_command("eval_retrieval", "--locomo", str(path), "--channels", "time,graph-walk", stdout=StringIO())


def test_the_graph_channels_flag_holds_for_its_run_only(tmp_path: Path, db: Any) -> None:
    # --graph-channels switches SEARCH_GRAPH_CHANNELS on for the run; the process that called the
    # command (a test run, a shell) goes on with the setting as it was.
    assert settings.SEARCH_GRAPH_CHANNELS is False
    with pytest.raises(CommandError, match="no file"):
        call_command("eval_retrieval", "--locomo", str(tmp_path / "absent.json"), "--graph-channels", stdout=StringIO())
    assert settings.SEARCH_GRAPH_CHANNELS is False


def test_eval_retrieval_writes_each_questions_turns_and_channel_lists(tmp_path: Path, db: Any) -> None:
    # --questions-out: one JSON line per question and method, the page's dia_ids in order and each
    # channel's own list, so that a missed evidence turn can be looked for in the channels.
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(LOCOMO))
    rows_path = tmp_path / "questions.jsonl"
    out = StringIO()

    call_command(
        "eval_retrieval",
        "--locomo",
        str(path),
        "--methods",
        "keyword,hybrid",
        "--channels",
        "none",
        "--k",
        "1,5",
        "--json",
        "--questions-out",
        str(rows_path),
        stdout=out,
    )

    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    # Three questions with evidence, each asked by both methods.
    assert len(rows) == 6 and {r["method"] for r in rows} == {"keyword", "hybrid"}
    turns = {"D1:1", "D1:2", "D1:3", "D2:1", "D2:2"}
    for row in rows:
        assert row["conversation"] == "tiny-1"
        assert set(row["ranked"]) <= turns and len(row["ranked"]) == len(set(row["ranked"]))
        assert all(set(ids) <= turns for ids in row["channels"].values())
    cello = next(r for r in rows if r["method"] == "hybrid" and r["question"].startswith("Which instrument"))
    assert cello["category"] == "multi-hop" and cello["evidence"] == ["D1:2", "D2:1"]
    assert {"entry:keyword", "entry:vector"} <= set(cello["channels"])
    # The rows give back the printed recall: the share of evidence in each page's first k.
    for method in ("keyword", "hybrid"):
        mine = [r for r in rows if r["method"] == method]
        recall = sum(len(set(r["evidence"]) & set(r["ranked"][:5])) / len(r["evidence"]) for r in mine) / len(mine)
        assert round(100 * recall, 1) == summary[method]["recall@5"]


def test_questions_out_reads_a_locomo_file_only(tmp_path: Path, db: Any) -> None:
    path = tmp_path / "longmemeval.json"
    path.write_text("[]")
    with pytest.raises(CommandError, match="--questions-out reads a LoCoMo file"):
        call_command(
            "eval_retrieval",
            "--longmemeval",
            str(path),
            "--questions-out",
            str(tmp_path / "q.jsonl"),
            stdout=StringIO(),
        )
    assert not (tmp_path / "q.jsonl").exists()
