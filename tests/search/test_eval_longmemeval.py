"""eval_retrieval --longmemeval: each question's haystack a thread, `has_answer` turns the evidence, turn
recall@k and session recall_all@k per question type.

There is no LongMemEval file on this machine: the file here is synthetic, written in LongMemEval's
documented JSON shape (question_id, question_type, question, answer, question_date,
haystack_session_ids, haystack_dates, haystack_sessions [[{role, content, has_answer}]],
answer_session_ids), small enough to score by hand.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memoryapp.management.longmemeval import haystack_date, question_thread_id, sessions_ranked
from memoryapp.models import Agent, Entry

FILLER = [
    {"role": "user", "content": "Can you suggest a recipe for a quick weekday dinner?"},
    {"role": "assistant", "content": "Try a tomato pasta with garlic and basil, ready in twenty minutes."},
]


def _session(*turns: tuple[str, str, bool]) -> list[dict[str, Any]]:
    return [{"role": role, "content": text, **({"has_answer": True} if answer else {})} for role, text, answer in turns]


LONGMEMEVAL = [
    {
        "question_id": "q-beagle",
        "question_type": "single-session-user",
        "question": "What is the name of my beagle?",
        "answer": "Biscuit",
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_session_ids": ["s-a", "s-b", "s-c"],
        "haystack_dates": ["2023/05/01 (Mon) 09:00", "2023/05/10 (Wed) 18:30", "2023/05/20 (Sat) 02:21"],
        "haystack_sessions": [
            FILLER,
            _session(
                ("user", "I adopted a beagle last spring, his name is Biscuit.", True),
                ("assistant", "Congratulations on the new dog!", False),
            ),
            FILLER,
        ],
        "answer_session_ids": ["s-b"],
    },
    {
        "question_id": "q-cello",
        "question_type": "multi-session",
        "question": "Who teaches me the cello, and in which month did I start the cello?",
        "answer": "Ines; March",
        "question_date": "2023/07/01 (Sat) 10:00",
        "haystack_session_ids": ["s-1", "s-2", "s-3", "s-4"],
        "haystack_dates": ["2023/03/02 (Thu) 09:00", "2023/03/05 (Sun) 09:00", "2023/04/10 (Mon) 09:00", "bad date"],
        "haystack_sessions": [
            _session(("user", "I started the cello in March, it is hard on the fingers.", True)),
            FILLER,
            _session(("user", "My cello teacher is called Ines, she is very patient.", True)),
            FILLER,
        ],
        "answer_session_ids": ["s-1", "s-3"],
    },
    {
        "question_id": "q-city_abs",
        "question_type": "single-session-user",
        "question": "Which city did I move to last year?",
        "answer": "The user never said.",
        "question_date": "2023/07/01 (Sat) 10:00",
        "haystack_session_ids": ["s-x"],
        "haystack_dates": ["2023/01/01 (Sun) 09:00"],
        "haystack_sessions": [FILLER],
        "answer_session_ids": [],
    },
]


def _run(tmp_path: Path, *options: str) -> str:
    path = tmp_path / "longmemeval_s.json"
    path.write_text(json.dumps(LONGMEMEVAL))
    out = StringIO()
    call_command("eval_retrieval", "--longmemeval", str(path), *options, stdout=out)
    return out.getvalue()


def test_longmemeval_scores_turn_recall_and_session_recall_all_per_question_type_and_cleans_up(
    tmp_path: Path, db: None
) -> None:
    agents_before = Agent.objects.count()

    report = json.loads(_run(tmp_path, "--k", "1,5", "--methods", "keyword", "--json").strip().splitlines()[-1])

    row = report["summary"]["keyword"]
    # The abstention question has neither evidence turns nor answer sessions: it scores nothing.
    assert row["questions_turn"] == 2 and row["questions_session"] == 2
    assert row["turn_recall@5"] == 100.0 and row["session_recall_all@5"] == 100.0
    types = report["by_type"]["keyword"]
    assert set(types) == {"single-session-user", "multi-session"}
    # Two answer sessions: one turn found first can never hold them all; five can.
    assert types["multi-session"]["session_recall_all@1"] == 0.0
    assert types["multi-session"]["turn_recall@1"] == 50.0 and types["multi-session"]["turn_recall@5"] == 100.0
    assert types["single-session-user"]["turn_recall@1"] == 100.0
    assert types["single-session-user"]["session_recall_all@1"] == 100.0
    assert Agent.objects.count() == agents_before
    assert not Entry.objects.filter(metadata__has_key="has_answer").exists()


def test_longmemeval_prints_a_table_for_the_chosen_questions(tmp_path: Path, db: Any) -> None:
    text = _run(tmp_path, "--methods", "keyword,hybrid", "--questions", "q-cello", "--k", "1,5")
    assert "q-cello" in text and "q-beagle" not in text
    assert "T@5" in text and "S-all@1" in text and "multi-session" in text and "single-session-user" not in text
    assert "hybrid" in text
    limited = _run(tmp_path, "--methods", "keyword", "--limit", "1", "--json")
    assert json.loads(limited.splitlines()[-1])["by_type"]["keyword"].keys() == {"single-session-user"}


def test_longmemeval_refuses_a_file_that_is_not_a_list_of_questions(tmp_path: Path, db: Any) -> None:
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps({"question_id": "q"}))
    with pytest.raises(CommandError, match="list of questions"):
        call_command("eval_retrieval", "--longmemeval", str(path))
    with pytest.raises(CommandError):
        call_command("eval_retrieval", "--longmemeval", str(path), "--locomo", str(path))


def test_haystack_dates_thread_ids_and_session_ranking_read_as_longmemeval_writes_them() -> None:
    assert haystack_date("2023/05/20 (Sat) 02:21").isoformat() == "2023-05-20T02:21:00+00:00"  # type: ignore[union-attr]
    assert haystack_date("bad date") is None and haystack_date(None) is None
    assert question_thread_id("gpt4_2655b836 / x", 3) == "lme-3-gpt4_2655b836---x"
    ranked = sessions_ranked(["e1", "e2", "e3", "e4"], {"e1": "s2", "e2": "s2", "e3": "s1", "e4": "s3"})
    assert ranked == ["s2", "s1", "s3"]


def test_a_haystack_turn_quoting_a_secret_is_indexed_as_written(tmp_path: Path, db: Any) -> None:
    # The default screening refuses a turn holding a credential; the run's agent screens nothing, so
    # the haystack is indexed whole and the evidence is where the file puts it.
    secret = 'My config has api_key = "sk-9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c" and the beagle is Biscuit.'
    question = {
        **LONGMEMEVAL[0],
        "haystack_sessions": [FILLER, _session(("user", secret, True)), FILLER],
    }
    path = tmp_path / "longmemeval_s.json"
    path.write_text(json.dumps([question]))
    out = StringIO()
    call_command("eval_retrieval", "--longmemeval", str(path), "--methods", "keyword", "--k", "5", "--json", stdout=out)

    row = json.loads(out.getvalue().strip().splitlines()[-1])["summary"]["keyword"]
    assert row["questions_turn"] == 1 and row["turn_recall@5"] == 100.0
