"""The language-model port: providers against real local HTTP servers, retries, usage, scripted and none."""

from __future__ import annotations

import pytest
from django.test import override_settings

from memoryapp.llm import http as llm_http
from memoryapp.llm.anthropic import AnthropicModel
from memoryapp.llm.arrays import NoArrayError, ask_for_array, parse_json_array
from memoryapp.llm.model import Completion, ModelError, ModelTransientError, ModelUnavailable, Usage
from memoryapp.llm.openai import OpenAIChatModel
from memoryapp.llm.port import complete, current_model, model_available, recording_usage, use_model
from memoryapp.llm.scripted import ScriptedModel, set_script
from tests.kit.factories import JobRunFactory
from tests.kit.servers import ModelServer, Reply, free_port


def openai_reply(text: str, finish: str = "stop", prompt: int = 12, completion: int = 5) -> Reply:
    return Reply(
        200,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        },
    )


def anthropic_reply(text: str, stop: str = "end_turn") -> Reply:
    return Reply(
        200,
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop,
            "usage": {"input_tokens": 20, "output_tokens": 7},
        },
    )


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_http, "BACKOFF_BASE_SECONDS", 0.01)
    monkeypatch.setattr(llm_http, "BACKOFF_MAX_SECONDS", 0.02)


def test_openai_provider_speaks_chat_completions() -> None:
    with ModelServer([openai_reply("Hello there.")]).running() as server:
        model = OpenAIChatModel(base_url=server.url + "/v1", model="m-1", api_key="sk-test")
        answer = model.complete(
            system="Be brief.", messages=[{"role": "user", "content": "Hi"}], max_tokens=50, timeout=5
        )
    assert answer.text == "Hello there." and answer.finish_reason == "stop"
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (12, 5)
    request = server.seen[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["model"] == "m-1" and request.body["max_tokens"] == 50
    assert request.body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_openai_answer_cut_at_its_limit_says_length() -> None:
    with ModelServer([openai_reply('[{"a": 1}, {"b"', finish="length")]).running() as server:
        answer = OpenAIChatModel(base_url=server.url, model="m").complete(
            system="", messages=[{"role": "user", "content": "x"}], max_tokens=5, timeout=5
        )
    assert answer.finish_reason == "length"
    assert "authorization" not in server.seen[0].headers  # no key, no header (a local Ollama)


def test_a_429_is_asked_again_and_the_usage_lands_on_the_job_run(db: None) -> None:
    replies = [Reply(429, {"error": "slow down"}, {"Retry-After": "0"}), openai_reply("ok", prompt=100, completion=3)]
    run = JobRunFactory()
    with ModelServer(replies).running() as server:
        model = OpenAIChatModel(base_url=server.url, model="m", max_retries=2)
        with recording_usage(run):
            answer = complete(system="s", messages=[{"role": "user", "content": "q"}], model=model, timeout=5)
    assert answer.text == "ok" and len(server.seen) == 2
    run.refresh_from_db()
    assert run.usage["calls"] == 1
    assert (run.usage["input_tokens"], run.usage["output_tokens"]) == (100, 3)
    assert run.usage["latency_ms"] >= 0


def test_a_400_is_not_asked_again() -> None:
    with ModelServer([Reply(400, {"error": "bad request"}), openai_reply("never")]).running() as server:
        model = OpenAIChatModel(base_url=server.url, model="m", max_retries=3)
        with pytest.raises(ModelError) as raised:
            model.complete(system="s", messages=[{"role": "user", "content": "q"}], max_tokens=5, timeout=5)
    assert not isinstance(raised.value, ModelTransientError)
    assert "400" in str(raised.value) and len(server.seen) == 1


def test_server_errors_are_retried_a_bounded_number_of_times(quick_backoff: None) -> None:
    replies = [Reply(503, {"error": "down"}) for _ in range(5)]
    with ModelServer(replies).running() as server:
        model = OpenAIChatModel(base_url=server.url, model="m", max_retries=2)
        with pytest.raises(ModelTransientError):
            model.complete(system="s", messages=[{"role": "user", "content": "q"}], max_tokens=5, timeout=5)
    assert len(server.seen) == 3  # the first try and two retries


def test_a_refused_connection_is_transient_and_bounded(quick_backoff: None) -> None:
    model = OpenAIChatModel(base_url=f"http://127.0.0.1:{free_port()}", model="m", max_retries=1)
    with pytest.raises(ModelTransientError):
        model.complete(system="s", messages=[{"role": "user", "content": "q"}], max_tokens=5, timeout=2)


def test_anthropic_provider_speaks_the_messages_api() -> None:
    with ModelServer(
        [Reply(529, {"type": "error"}, {"Retry-After": "0"}), anthropic_reply("Bonjour")]
    ).running() as server:
        model = AnthropicModel(base_url=server.url, model="claude-x", api_key="ak-1", max_retries=1)
        answer = model.complete(
            system="Be kind.", messages=[{"role": "user", "content": "Hi"}], max_tokens=64, timeout=5
        )
    assert answer.text == "Bonjour" and answer.finish_reason == "stop"
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (20, 7)
    request = server.seen[-1]
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "ak-1" and request.headers["anthropic-version"] == "2023-06-01"
    assert request.body["system"] == "Be kind." and request.body["max_tokens"] == 64
    assert request.body["messages"] == [{"role": "user", "content": "Hi"}]


def test_anthropic_max_tokens_stop_is_a_cut_answer_and_4xx_is_final() -> None:
    with ModelServer([anthropic_reply("[1,", stop="max_tokens"), Reply(401, {"error": "key"})]).running() as server:
        model = AnthropicModel(base_url=server.url + "/v1", model="c", max_retries=3)
        cut = model.complete(system="", messages=[{"role": "user", "content": "x"}], max_tokens=2, timeout=5)
        with pytest.raises(ModelError):
            model.complete(system="", messages=[{"role": "user", "content": "x"}], max_tokens=2, timeout=5)
    assert cut.finish_reason == "length" and len(server.seen) == 2
    assert server.seen[0].path == "/v1/messages"


def test_providers_are_chosen_by_settings() -> None:
    with override_settings(LLM_PROVIDER="none"):
        assert not model_available()
        with pytest.raises(ModelUnavailable):
            complete(system="s", messages=[{"role": "user", "content": "q"}])
    with override_settings(LLM_PROVIDER="openai", LLM_BASE_URL="http://llm.local/v1", LLM_MODEL="qwen"):
        model = current_model()
        assert isinstance(model, OpenAIChatModel) and model.base_url == "http://llm.local/v1" and model.model == "qwen"
    with override_settings(LLM_PROVIDER="anthropic", LLM_BASE_URL=None, LLM_MODEL=""):
        model = current_model()
        assert isinstance(model, AnthropicModel) and model.base_url == "https://api.anthropic.com"


def test_scripted_model_answers_from_a_list_or_a_function(db: None) -> None:  # each call is an audit record
    listed = ScriptedModel(["one", Completion("two", "length", Usage(1, 2, 3.0)), ValueError("boom")])
    with use_model(listed):
        assert complete(system="s", messages=[{"role": "user", "content": "a"}]).text == "one"
        second = complete(system="s", messages=[{"role": "user", "content": "b"}], max_tokens=9, timeout=3)
        assert (second.text, second.finish_reason) == ("two", "length")
        with pytest.raises(ValueError):
            complete(system="s", messages=[{"role": "user", "content": "c"}])
    assert [c.messages[0]["content"] for c in listed.calls] == ["a", "b", "c"]
    assert listed.calls[1].max_tokens == 9 and listed.calls[1].timeout == 3
    with use_model(ScriptedModel(lambda system, messages: system.upper())):
        assert complete(system="shout", messages=[]).text == "SHOUT"


def test_scripted_provider_without_a_script_is_unavailable(db: None) -> None:  # each call is an audit record
    with override_settings(LLM_PROVIDER="scripted"):
        set_script(None)
        assert not model_available()
        set_script(["hello"])
        try:
            assert model_available()
            assert complete(system="", messages=[{"role": "user", "content": "x"}]).text == "hello"
        finally:
            set_script(None)


# --- reading arrays out of answers ------------------------------------------------------------------


def test_array_is_found_past_text_and_message_numbers() -> None:
    parsed = parse_json_array('As message [3] says, here you go:\n```json\n[{"a": 1}, {"b": 2}]\n```\nDone.')
    assert parsed.found and parsed.complete and parsed.elements == [{"a": 1}, {"b": 2}]
    assert parse_json_array("Nothing to record: []").elements == []
    assert not parse_json_array("See [3] and [4].").found


def test_elements_that_are_not_json_are_left_out_and_a_cut_array_keeps_what_finished() -> None:
    broken = parse_json_array('[{"a": 1}, {oops}, {"c": 3}]')
    assert broken.elements == [{"a": 1}, {"c": 3}] and broken.malformed == 1
    cut = parse_json_array('[{"a": 1}, {"b": "half')
    assert cut.found and not cut.complete and cut.elements == [{"a": 1}]


def test_ask_for_array_tries_three_times_then_gives_up(db: None) -> None:  # each call is an audit record
    model = ScriptedModel(["no idea", "still prose", "nope", "[]"])
    with use_model(model), pytest.raises(NoArrayError):
        ask_for_array(system="s", user="u", max_tokens=10)
    assert len(model.calls) == 3


def test_ask_for_array_continues_a_cut_answer_after_its_last_element(db: None) -> None:  # each call is an audit record
    model = ScriptedModel(
        [
            Completion('[{"n": 1}, {"n": 2}, {"n"', "length"),
            Completion('[{"n": 2}, {"n": 3}, {"n": 4', "length"),
            Completion('[{"n": 5}]', "stop"),
        ]
    )
    with use_model(model):
        answer = ask_for_array(system="s", user="u", max_tokens=10, continuation_prompt="go on after {last}")
    assert answer.elements == [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 5}]
    assert answer.continuations == 2 and answer.complete
    assert model.calls[1].messages[-1]["content"] == 'go on after {"n": 2}'
    assert model.calls[1].messages[-2]["role"] == "assistant"


def test_continuations_stop_after_four(db: None) -> None:  # each call is an audit record
    model = ScriptedModel([Completion(f'[{{"n": {i}}}, {{"n"', "length") for i in range(10)])
    with use_model(model):
        answer = ask_for_array(system="s", user="u", max_tokens=10)
    assert len(model.calls) == 5 and not answer.complete
    assert answer.elements == [{"n": i} for i in range(5)]
