from __future__ import annotations

from django.db import models

from governance.crypto.fields import EqualityHashField, SealedTextField
from memoryapp.models.agents import Agent


class IdentifierKind(models.TextChoices):
    EMAIL = "email"
    PHONE = "phone"
    NAME = "name"
    EXTERNAL_ID = "external_id"


def identifier_key(kind: str, value: str) -> str:
    """What `PersonIdentifier.lookup` holds for a normalised value (hashed when encryption is on):
    the kind and the value, so an external id never matches a name spelled the same."""
    return f"{kind}:{value}"


class PersonIdentifier(models.Model):
    """One identifier of a person an agent's memory is about (memoryapp.screening.identifiers).

    `value` is normalised (e-mail lower-cased, phone in E.164, a name case- and accent-folded) and
    sealed at rest under the person's data key, so destroying that key leaves it unreadable;
    `lookup` is `kind:value` as an equality column (a keyed hash under the agent's blind key when
    encryption is on): screening finds a registered person in a text by hashing what it read
    there, never by reading identifiers back.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    user_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=12, choices=IdentifierKind.choices)
    value = SealedTextField()
    lookup = EqualityHashField(max_length=300, source="value", kept="lookup_kept")
    # With encryption on, the `kind:value` that `lookup` hashes, sealed: a key rotation hashes it
    # again (governance.crypto.fields.EqualityHashField); "" with encryption off.
    lookup_kept = SealedTextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "user_id", "lookup"], name="person_identifier_uniq"),
        ]
        indexes = [
            # screening: which registered identifiers of the agent a text holds (lookup IN hashes).
            models.Index(fields=["agent", "lookup"], name="person_identifier_lookup_idx"),
            # the identifiers of one person (GET, PUT, erasure).
            models.Index(fields=["agent", "user_id"], name="person_identifier_user_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of {self.user_id}"

    def encryption_owner(self) -> tuple[int | None, str]:
        """Sealed under the data key of the person it identifies (governance.crypto.envelope)."""
        return (self.agent_id, self.user_id)
