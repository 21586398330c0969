"""A turn screening holds (issue 25 §3): stored, but out of search, context, extraction and the
embedder until a reviewer releases it; an item held waits in the review queue as suggested."""

from __future__ import annotations

import json

import pytest

from governance.models import AuditRecord
from memoryapp.compaction.services import compaction_run
from memoryapp.extraction.services import extraction_run
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Entry, MemoryItem, Thread
from memoryapp.search import embedders
from memoryapp.search.indexing import embed_pending
from memoryapp.threads.screened import entry_hold_release
from tests.kit.api import THREADS, Caller, answered, build_context, patch_ok, post_ok, post_thread

HELD = "My IBAN is GB82 WEST 1234 5698 7654 32, pay the zephyrine invoice there."


def search_texts(caller: Caller, text: str) -> list[str]:
    answer = post_ok(caller.client, "/api/v1/search", {"text": text, "method": "keyword"}, status=200)
    return [json.dumps(hit) for hit in answer["results"]]


def test_a_held_turn_is_out_of_search_context_extraction_and_the_embedder_until_released(
    alice: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    patch_ok(alice.client, "/api/v1/settings/screening", {"iban": "hold"})
    post_thread(alice, "t-h")
    post_ok(
        alice.client,
        f"{THREADS}/t-h/entries",
        {
            "entries": [
                {"role": "user", "content": "We talk about the zephyrine project."},
                {"role": "user", "content": HELD},
            ]
        },
    )
    held = Entry.objects.get(thread__external_id="t-h", seq=2)
    assert held.held_at is not None and held.text == HELD  # stored as written, not redacted
    record = AuditRecord.objects.get(action="screening.screened")
    assert record.details["decisions"] == [{"category": "iban", "action": "hold", "field": "entries[1].content"}]

    real = embedders.embedder()
    embedded: list[str] = []

    class Recording:
        name, dimensions = real.name, real.dimensions

        def embed(self, texts: list[str]) -> list[list[float]]:
            embedded.extend(texts)
            return real.embed(texts)

    monkeypatch.setattr(embedders, "embedder", lambda: Recording())
    embed_pending(agent_id=alice.agent.pk)
    assert embedded and not any("GB82" in text for text in embedded)
    found = search_texts(alice, "zephyrine")
    assert len(found) == 1 and "GB82" not in found[0]
    context = json.dumps(build_context(alice, "t-h", max_tokens=4000))
    assert "zephyrine project" in context and "GB82" not in context
    model = ScriptedModel(lambda system, messages: "[]")
    with use_model(model):
        extraction_run(thread=Thread.objects.get(agent=alice.agent, external_id="t-h"))
    assert model.calls and "GB82" not in json.dumps([c.messages for c in model.calls], default=str)

    assert entry_hold_release(entry=held, actor="staff:reviewer") is True
    assert entry_hold_release(entry=held, actor="staff:reviewer") is False
    assert AuditRecord.objects.filter(action="screening.released", subject=held.pk).count() == 1
    embed_pending(agent_id=alice.agent.pk)
    assert any("GB82" in text for text in embedded)
    assert any("GB82" in hit for hit in search_texts(alice, "zephyrine"))
    assert "GB82" in json.dumps(build_context(alice, "t-h", max_tokens=4000))


def test_a_fact_held_waits_in_the_review_queue_as_suggested_and_is_not_recalled(alice: Caller) -> None:
    patch_ok(alice.client, "/api/v1/settings/screening", {"email": "hold"})
    answered(alice.client.put("/api/v1/facts/users/ines/contact", {"value": "ines@example.com"}, format="json"), 200)
    stored = MemoryItem.objects.get(agent=alice.agent, attribute="core:contact")
    assert stored.status == "suggested" and stored.metadata["screening_held"] == ["email"]
    assert stored.value == "ines@example.com"
    assert alice.client.get("/api/v1/facts/users/ines/contact").status_code == 404
    assert not any("ines@example.com" in hit for hit in search_texts(alice, "ines contact"))


def test_a_held_turn_is_not_read_by_the_summarizer_of_a_compaction(alice: Caller) -> None:
    patch_ok(alice.client, "/api/v1/settings/screening", {"iban": "hold"})
    post_thread(alice, "t-c")
    turns = [{"role": "user" if i % 2 else "assistant", "content": f"turn {i} about the garden"} for i in range(12)]
    turns[3] = {"role": "user", "content": HELD}
    post_ok(alice.client, f"{THREADS}/t-c/entries", {"entries": turns})
    model = ScriptedModel(lambda system, messages: "They talked about the garden.")
    with use_model(model):
        compaction_run(
            thread=Thread.objects.get(agent=alice.agent, external_id="t-c"),
            strategy="summarize-old-preserve-recent",
            options={"preserve_recent_turns": 2},
        )
    sent = json.dumps([[c.system, c.messages] for c in model.calls], default=str)
    assert model.calls and "turn 1 about" in sent and "GB82" not in sent
