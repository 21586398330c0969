"""How the service makes ids (memoryapp.ids): the random part drawn many ids at a time (not one
system call an entry of a batch), never shared with a forked child, and the entry tags of ids
already stored unchanged by how they are written."""

from __future__ import annotations

import os
import re
import time

import pytest

from memoryapp import ids

AN_ID = re.compile(r"ent_[0-9a-hjkmnp-tv-z]{26}")


def test_a_batchs_ids_draw_their_random_bytes_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    draws: list[int] = []
    urandom = os.urandom

    def counted(size: int) -> bytes:
        draws.append(size)
        return urandom(size)

    monkeypatch.setattr(ids, "_random", type(ids._random)())  # this thread's pool, empty
    monkeypatch.setattr(os, "urandom", counted)
    made = [ids.new_id("ent") for _ in range(100)]
    # 100 ids, two draws (64 ids a draw); one a system call each, 100, before
    assert len(draws) == 2
    assert len(set(made)) == 100 and all(AN_ID.fullmatch(i) for i in made)


def test_ids_sort_by_when_they_were_made() -> None:
    first = ids.new_id("ent")
    time.sleep(0.002)
    later = ids.new_id("ent")
    assert first[4:14] < later[4:14]
    millis = int(time.time() * 1000)
    assert ids._millis_head(millis) == "".join(ids._ALPHABET[(millis >> (5 * i)) & 31] for i in reversed(range(10)))


def test_a_forked_child_never_makes_its_parents_next_id() -> None:
    ids.new_id("ent")  # the parent's pool holds the bytes of its next ids
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's side
        os.write(write, ids.new_id("ent").encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    childs = os.read(read, 100).decode()
    os.close(read)
    parents = ids.new_id("ent")
    assert AN_ID.fullmatch(childs) and childs[14:] != parents[14:]


def test_the_tags_of_stored_ids_are_the_same_as_before() -> None:
    # Written under a secret of the test's: the tag of a made id and an imported id's derived body,
    # as the encoding one character a step gave them (an id stored before must keep its tag).
    assert ids._entry_tag("ent_01jabcdefgh0123456789abcdef", agent_id=7, secret="a-secret") == "kp6gcymk"
    digest = ids._hmac(ids._ENTRY_IMPORT_SALT, "7:node-1", secret="a-secret")
    assert ids._base32(digest, 26) == "mgc3yczdh2xy31400sqk4xyyv4"
    assert ids._base32(digest, 26).startswith(ids._base32(digest, 7))
