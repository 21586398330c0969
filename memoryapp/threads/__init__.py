"""Threads and entries: the conversation store as a tree.

`services` writes (create, append, rewind, checkout, fork), `selectors` reads (the one way in to an
agent's threads), `validation` checks what a client sends, `hashing` keeps content hashes true,
`branch` walks a branch, `columns` names Entry's columns, `redaction` says what a redaction does to a
row, `transfer` exports and imports JSONL, `hooks` tells what follows new entries. Deleting and
redacting, with what memory derived from the entries, is `memoryapp.forgetting`.
"""
