"""The vector space: which embedder, model and dimensions made the stored vectors (one row).

`memoryapp.search.space` reads it against the configured model (EMBEDDER, EMBEDDING_MODEL,
EMBEDDING_DIMENSIONS): a vector search compares a query's vector with stored ones, which is only
meaningful when one model made both.
"""

from __future__ import annotations

from django.db import models


class VectorSpace(models.Model):
    """The one row (pk 1). Absent: nothing was embedded yet (the first write of a vector records
    the configured model). `moving_to` is the model a `reembed` of every agent is moving the
    vectors to while it runs ("" otherwise): until it finishes, the stored vectors are still
    recorded as `embedder:model`'s (some already the new model's)."""

    embedder = models.CharField(max_length=20)
    model = models.CharField(max_length=200, blank=True)
    dimensions = models.PositiveIntegerField()
    recorded_at = models.DateTimeField()
    moving_to = models.CharField(max_length=220, blank=True, default="")
    moving_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="vector_space_one_row")]

    def __str__(self) -> str:
        return f"{self.embedder}:{self.model} ({self.dimensions} dimensions)"
