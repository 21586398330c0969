"""The subject index: which stored rows are about whom (issue 25 §2), and what an erasure does
with the rows that only mention a person (§4).

A row is about a person in three ways:

- owner: the person whose scope it is in (`user_id` of a thread, item, entity, file version);
- sender: the person who wrote a message (`metadata.userId`, the one rule of
  `memoryapp.models.people.message_sender`), or a participant a thread lists (`memoryUserIds`);
- mention: a row of another scope whose text names the person by one of their identifiers
  (registered with `PUT /users/{id}/identifiers`, or given with the erasure request).

Owner and sender are columns the rows carry, indexed (`entry_sender_column_idx`); mentions are found by
`subject_index_rebuild` and kept in `SubjectMention`.

- `matching`: one person's identifiers as a matcher over texts and JSON (spans, placeholder).
- `index`: the scan over every table that can hold personal data, the index's rebuild and reads.
- `mentions`: the erasure of mentions (placeholders, re-indexed, re-embedded; subjects deleted).
- `detect`: the mentions found at write, in the writer's transaction.
- `erasing`: writes against a person's erasure (its mark, the lock writers naming her take
  shared, the placeholder they store while she is being erased).
"""
