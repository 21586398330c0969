"""Which columns of each table of the subject index hold text that can name a person (issue 25 §2,
§4), said once: the scan and the write-time detector read them (`row_texts`), and every redaction
of a person's identifiers replaces them (`row_redact`): the erasure's, in the rows it keeps
(memoryapp.forgetting.mentions), and the placeholder a write stores while she is being erased
(memoryapp.subjects.erasing). A column added here is read and redacted by both; what a row derives
from its texts (hashes, sizes, an entry's text) is made again with them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from memoryapp.models import SubjectMention
from memoryapp.models.items import name_normalized
from memoryapp.subjects.matching import PersonMatcher

Table = SubjectMention.Table

# A table's columns of text, in the order the scan reads them; True: a JSON value (each string in
# it read and redacted, keys aside), False: a string.
TEXT_COLUMNS: dict[str, tuple[tuple[str, bool], ...]] = {
    Table.ENTRY: (("content", True), ("tool_calls", True), ("event", True), ("metadata", True), ("sender_name", False)),
    Table.THREAD: (("metadata", True),),
    Table.ITEM: (("subject", False), ("attribute", False), ("value", False), ("value_json", True), ("metadata", True)),
    Table.ENTITY: (("name", False), ("aliases", True)),
    Table.EVIDENCE: (("quote", False),),
    Table.FILE_VERSION: (("content", False),),
    Table.RELATION_EVIDENCE: (("quote", False),),
    Table.KNOWLEDGE_DOCUMENT: (("name", False), ("content", False)),
    Table.RUN_EVENT: (("body", True),),
    Table.THREAD_RUN: (("snapshot", True),),
    Table.JOB_RUN: (("arguments", True), ("result", True)),
}


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _file_version_derive(row: Any) -> None:
    if row.content is not None:  # a deletion has no text, nothing derived
        row.sha256, row.size = _sha256(row.content), len(row.content.encode("utf-8"))  # memoryapp.files.text


def _entity_derive(row: Any) -> None:
    row.normalized_name = name_normalized(row.name)


def _knowledge_derive(row: Any) -> None:
    row.sha256 = _sha256(row.content)


# What a row derives from its texts, made again after a redaction: the columns, and what sets them
# (None: the columns' fields make them as the row is saved: blind indexes, keyed hashes). With
# encryption on, an entity's save hashes its normalised name and keeps it sealed beside
# (`normalized_name_kept`): saved too, or the old name would stay kept.
_DERIVED: dict[str, tuple[tuple[str, ...], Callable[[Any], None] | None]] = {
    Table.ENTRY: (("sender_name_hashes", "keyword_hashes"), None),
    Table.ITEM: (("subject_hash", "keyword_hashes"), None),
    Table.ENTITY: (("normalized_name", "normalized_name_kept"), _entity_derive),
    Table.FILE_VERSION: (("sha256", "size"), _file_version_derive),
    Table.KNOWLEDGE_DOCUMENT: (("sha256",), _knowledge_derive),
}
assert set(_DERIVED) <= set(TEXT_COLUMNS) == set(Table.values)


def redacted_columns(table: str) -> list[str]:
    """The columns `row_redact` changes in a row of `table` (its texts and what derives from them),
    besides those a registered refresh answers: for a writer that saves a row `rows_named` redacted."""
    return [*(column for column, _ in TEXT_COLUMNS[table]), *_DERIVED.get(table, ((), None))[0]]


# What a table's rows need made again from their redacted texts, where the package writing them
# owns how (an entry's text and hash: memoryapp.threads), registered at start (memoryapp.apps).
_REFRESH: dict[str, Callable[[Any], list[str]]] = {}


def redaction_refresh_register(table: str, refresh: Callable[[Any], list[str]]) -> None:
    """`refresh(row)` makes again what a row of `table` derives from its texts (answers the fields)."""
    _REFRESH[table] = refresh


def row_texts(table: str, row: Any) -> list[Any]:
    """The texts (strings and JSON values) of a row, as the scan reads them."""
    return [getattr(row, column) for column, _ in TEXT_COLUMNS[table]]


def texts_redacted(table: str, row: Any, matcher: PersonMatcher) -> dict[str, Any]:
    """The row's texts with every span naming the person replaced by the placeholder, by column
    (the row left as it is: for a writer that makes the row again from them, a knowledge document)."""
    return {
        column: matcher.redacted_value(getattr(row, column)) if json_value else matcher.redacted(getattr(row, column))
        for column, json_value in TEXT_COLUMNS[table]
    }


def row_redact(table: str, row: Any, matcher: PersonMatcher) -> list[str]:
    """Replace in place every span of the row's texts naming the person by the placeholder, with
    what the row derives from them; answers the columns to save. A row holding the person's words
    (`words_of`) holds them no more: what stays is sealed under its owner's key."""
    for column, value in texts_redacted(table, row, matcher).items():
        setattr(row, column, value)
    derive = _DERIVED.get(table, ((), None))[1]
    if derive is not None:
        derive(row)
    fields = redacted_columns(table)
    refresh = _REFRESH.get(table)
    if refresh is not None:
        fields += refresh(row)
    if getattr(row, "words_of", None) == matcher.user_id:
        row.words_of = ""
        fields.append("words_of")
    return fields
