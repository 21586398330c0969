"""A vector cache for `eval_retrieval --vector-cache FILE`: texts embedded once across runs.

Indexing a benchmark embeds every turn (LongMemEval_S: some 29,000 long turns), which takes most
of a run's time on a small machine; the vectors of a text do not change while the model does not.
The cache is a SQLite file keyed by the embedder's name, model and dimensions and the text's
SHA-256: a run reads what an earlier run of the same model wrote, embeds the rest with the
configured embedder, and adds them. The search under evaluation is the product's, unchanged.
"""

from __future__ import annotations

import array
import hashlib
import sqlite3
from pathlib import Path

from django.conf import settings

from memoryapp.search.embedders import Embedder, queries_embedder


class CachedEmbedder:
    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimensions = inner.dimensions
        self.space = f"{inner.name}:{settings.EMBEDDING_MODEL}:{inner.dimensions}"
        self.db = sqlite3.connect(str(path))
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (space TEXT, digest TEXT, vector BLOB, PRIMARY KEY (space, digest))"
        )
        self.hits = 0
        self.misses = 0

    def _digest(self, text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._cached(texts, queries=False)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """A query is cached apart from the same text stored (a model may embed them differently)."""
        return self._cached(texts, queries=True)

    def _cached(self, texts: list[str], *, queries: bool) -> list[list[float]]:
        digests = [("q:" if queries else "") + self._digest(t) for t in texts]
        found: dict[str, list[float]] = {}
        for offset in range(0, len(digests), 500):
            chunk = digests[offset : offset + 500]
            rows = self.db.execute(
                f"SELECT digest, vector FROM vectors WHERE space = ? AND digest IN ({','.join('?' * len(chunk))})",
                [self.space, *chunk],
            ).fetchall()
            for digest, blob in rows:
                found[digest] = array.array("f", blob).tolist()
        missing = [i for i, d in enumerate(digests) if d not in found]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            missing_texts = [texts[i] for i in missing]
            vectors = queries_embedder(self.inner)(missing_texts) if queries else self.inner.embed(missing_texts)
            with self.db:
                for i, vector in zip(missing, vectors, strict=True):
                    found[digests[i]] = vector
                    self.db.execute(
                        "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                        (self.space, digests[i], array.array("f", vector).tobytes()),
                    )
        return [found[d] for d in digests]
