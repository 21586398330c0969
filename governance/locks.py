"""Every PostgreSQL advisory lock of the service, named in one place so no two uses share a key.

A leaf: it imports nothing of the project, so `governance.audit`, `governance.jobs` and every
capability package may take their keys from here. Two kinds of key:

- one bigint, `pg_advisory_xact_lock(key)`: the audit chain, and the slots of memory items (a
  hash of the slot, spread over the whole bigint range);
- two int4, `pg_advisory_*lock(class, number)`: the class says what is locked, the number which
  one (a row id folded into int4 by `pair`). PostgreSQL keeps the two kinds apart, so a class
  never meets a one-key lock.
"""

from __future__ import annotations

import hashlib

# One key: appends to the audit hash chain, one transaction after another ("MEMA").
AUDIT_CHAIN = 0x4D454D41

# Classes of two-key locks, with the number they lock.
JOB_RUN = 0x4A52  # "JR", a job run's id: held (session lock) by the process running it
EMBEDDING = 0x454D  # "EM", an agent's id: one embedding batch of the agent at a time
MEMORY_FILES = 0x4D46  # "MF", an agent's id: the agent's file writes go one after another
WEBHOOK = 0x5748  # "WH", a webhook's id: held (session lock) by the one process delivering to it
COMPACTION = 0x434D  # "CM", a thread's pk: held (session lock) by the one automatic compaction of it
# "ER", a person of an agent (`person`): their erasure of mentions takes it exclusive to mark them
# as being erased, each write naming them shared (memoryapp.subjects.erasing)
ERASING = 0x4552
# "EU", a person of an agent (`person`): held (session lock) by the process running their erasure,
# so a mark left with no holder is an erasure interrupted (memoryapp.subjects.erasing)
ERASURE_RUN = 0x4555
# "EP", a person in every agent (`person_anywhere`): held (session lock) by a staff erasure of her in
# several agents for its whole run, so a legal hold placed meanwhile can tell it runs
ERASURE_PERSON = 0x4550
# "HG", a person in every agent (`person_anywhere`): a legal hold on her (or her thread) being placed
# holds it exclusive to its commit; an erasure reads the holds holding it shared (memoryapp.subjects.erasing)
HOLDS_GATE = 0x4847


def pair(lock_class: int, number: int) -> tuple[int, int]:
    """The two int4 keys of a lock of `lock_class` on row `number` (a bigint id folded into int4)."""
    return lock_class, number % 2**31


def item_slot(*parts: str) -> int:
    """The one bigint key of a memory-item slot in one exact scope: a hash of what names it."""
    raw = "\x1f".join(parts)
    return int.from_bytes(hashlib.blake2b(raw.encode(), digest_size=8).digest(), "big", signed=True)


def channel_session(*parts: str) -> int:
    """The one bigint key of a channel session's key (agent, person, channel type, channel id): its
    openers queue on it. Salted apart from `item_slot`, so the two hashes name different keys."""
    raw = "\x1f".join(("channel-session", *parts))
    return int.from_bytes(hashlib.blake2b(raw.encode(), digest_size=8).digest(), "big", signed=True)


def person(agent_id: int, user_id: str) -> int:
    """The int4 number of a person of an agent, for a two-key lock (`ERASING`): a hash of both (two
    people sharing a number only wait on each other's erasure, never miss it)."""
    raw = f"{agent_id}\x1f{user_id}"
    return int.from_bytes(hashlib.blake2b(raw.encode(), digest_size=4).digest(), "big") % 2**31


def person_anywhere(user_id: str) -> int:
    """The int4 number of a person whatever the agent, for `ERASURE_PERSON` and `HOLDS_GATE`: a hash of
    her id, salted apart from `person` (two people sharing a number only wait on each other)."""
    raw = f"anywhere\x1f{user_id}"
    return int.from_bytes(hashlib.blake2b(raw.encode(), digest_size=4).digest(), "big") % 2**31
