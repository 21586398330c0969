"""Threads and entries: the conversation store as a tree, its branches, hashing and transfer (JSONL)."""
