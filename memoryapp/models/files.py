from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.db import models

from governance.crypto.fields import KeyPeopleField, SealedTextField
from memoryapp.ids import new_id
from memoryapp.models.choices import FileAuthor
from memoryapp.models.items import Scoped
from memoryapp.models.threads import Entry


def new_version_id() -> str:
    return new_id("mfv")


class MemoryFileVersion(Scoped):
    """One version of a memory file under /memories; content NULL is a deletion."""

    id = models.CharField(max_length=40, primary_key=True, default=new_version_id, editable=False)
    path = models.CharField(max_length=1024)
    sequence = models.IntegerField()
    # Sealed at rest when encryption is on (governance.crypto), under the scope's person's key; a
    # deletion stays NULL. Never compared in the database: the services open it in Python.
    content = SealedTextField(null=True, blank=True)
    # The sha256 of the plain content (optimistic locking, shown to callers), sealed as the content
    # is: in clear, it would let someone holding the database confirm a guessed content. Compared
    # in Python only. The size stays in clear (the sealed value's length tells it anyway).
    sha256 = SealedTextField(blank=True, default="")
    size = models.IntegerField(default=0)
    previous = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The entry the version was written after (its place on a branch), if any.
    place = models.ForeignKey(Entry, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    renamed_from = models.CharField(max_length=1024, blank=True, default="")
    author = models.CharField(max_length=10, choices=FileAuthor.choices, default=FileAuthor.MODEL)
    created_at = models.DateTimeField(auto_now_add=True)
    redacted_at = models.DateTimeField(null=True, blank=True)
    # Why it was redacted, as the person who asked typed it (an entry keeps its reason in
    # `metadata.redacted`): on the version, never in the audit chain, which says only that one was
    # given. Sealed like the content; "" when none was given or a cascade redacted it.
    redaction_reason = SealedTextField(blank=True, default="")
    # The registered people its content names besides its scope's person (a project file naming
    # one): their keys seal it too (governance.crypto.fields.KEY_PEOPLE).
    key_people = KeyPeopleField()

    class Meta:
        constraints = [
            # Two writers can never add the same version of one file.
            models.UniqueConstraint(
                fields=["agent", "user_id", "project_id", "thread_id", "path", "sequence"],
                name="file_version_scope_path_seq_uniq",
            ),
        ]
        indexes = [
            # files_list: the newest version of every path of a scope.
            models.Index(
                fields=["agent", "user_id", "project_id", "thread_id", "path", "-sequence"],
                name="file_version_head_idx",
            ),
            # the erasure: the versions sealed under a person's key among others.
            GinIndex(
                fields=["key_people"], name="file_version_key_people_gin", condition=models.Q(key_people__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.path}@{self.sequence}"
