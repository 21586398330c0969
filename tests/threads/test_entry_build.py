"""A new entry is built with its values put in place (memoryapp.threads.validation._entry_new): the
same row as Entry(**fields) gives, defaults included, without Model.__init__."""

from __future__ import annotations

import pytest
from django.db.models.expressions import DatabaseDefault
from django.db.models.signals import post_init, pre_init
from django.utils import timezone

from memoryapp.errors import DomainError
from memoryapp.ids import entry_id_is_agents
from memoryapp.models import Entry
from memoryapp.threads.hashing import content_hash, hashed_turn
from memoryapp.threads.validation import MAX_ENTRY_BYTES, _entry_new, entry_from_spec
from tests.kit.api import Caller
from tests.kit.factories import ThreadFactory


@pytest.mark.django_db
def test_an_entry_built_by_position_is_the_entry_built_by_keywords(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-b")
    spec = {"role": "user", "content": "Rome at eight", "metadata": {"k": [1]}}
    built = entry_from_spec(thread=thread, spec=spec, parent_id=None, seq=1, now=timezone.now())
    given = {
        f.attname: getattr(built, f.attname)
        for f in Entry._meta.concrete_fields
        if f.attname in built.__dict__ and not isinstance(built.__dict__[f.attname], DatabaseDefault)
    }
    by_keywords = Entry(**given)
    for field in Entry._meta.concrete_fields:
        name = field.attname
        if getattr(field, "generated", False):
            assert name not in built.__dict__ and name not in by_keywords.__dict__
        elif isinstance(by_keywords.__dict__.get(name), DatabaseDefault):
            assert isinstance(built.__dict__[name], DatabaseDefault)
        else:
            assert built.__dict__[name] == by_keywords.__dict__[name], name
    assert built.__dict__.keys() == by_keywords.__dict__.keys()
    assert built._state.adding and built._state.db is None
    assert built.metadata == {"k": [1]}
    # A mutable default is the entry's own: two entries given no metadata do not share one dict.
    first, second = _entry_new(content="a"), _entry_new(content="b")
    assert first.metadata == {} and first.metadata is not second.metadata
    assert first.pk != second.pk  # the id's default is made per entry too
    # A database default (stored_at's) is one expression for every entry, never changed in place:
    # not one made an entry (5% of a batch append's web CPU, issue 26).
    assert isinstance(first.stored_at, DatabaseDefault) and first.stored_at is second.stored_at


def test_nothing_listens_to_an_entrys_init_signals() -> None:
    """Model.__init__ sends pre_init and post_init, which `_entry_new` does not: a receiver for Entry
    (a field that tracks its first value, say) would need it to build entries through __init__."""
    assert not pre_init.has_listeners(Entry) and not post_init.has_listeners(Entry)


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["user", "assistant", "system"])
@pytest.mark.parametrize("content", ["Rome at eight", "", 'a "quoted"\\ line\n\ttab \x01 é ✓ 😀 \u2028'])
@pytest.mark.parametrize("parent_id", [None, 'ent_"odd"\\'])
def test_a_plain_message_is_the_entry_the_checks_build(
    alice: Caller, role: str, content: str, parent_id: str | None
) -> None:
    """A plain message is built without the checks that cannot fail for it (`_plain_message`): the
    same entry, hash included, as the full path builds (which `metadata: null` takes)."""
    thread = ThreadFactory(agent=alice.agent, external_id="t-p")
    now = timezone.now()
    plain = entry_from_spec(thread=thread, spec={"role": role, "content": content}, parent_id=parent_id, seq=3, now=now)
    checked = entry_from_spec(
        thread=thread, spec={"role": role, "content": content, "metadata": None}, parent_id=parent_id, seq=3, now=now
    )
    assert plain.__dict__.keys() == checked.__dict__.keys()
    for name, value in checked.__dict__.items():
        if name not in ("id", "_state"):
            assert plain.__dict__[name] == value, name
    assert plain.content_hash == content_hash(parent_id=parent_id, turn=hashed_turn(plain), created_at=now)
    assert entry_id_is_agents(plain.id, agent_id=alice.agent.pk) and plain.thread is thread
    assert plain._state.adding and plain._state.db is None
    unhashed = entry_from_spec(
        thread=thread, spec={"role": role, "content": content}, parent_id=parent_id, seq=3, now=now, hashed=False
    )
    assert unhashed.content_hash == ""


@pytest.mark.django_db
def test_what_is_not_a_plain_message_takes_the_checks(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-q")
    now = timezone.now()
    refused = [
        ({"role": "tool", "content": "x"}, "invalid_role", "e.role"),
        ({"role": "", "content": "x"}, "required", "e.role"),
        ({"role": ["user"], "content": "x"}, "invalid_role", "e.role"),
        ({"role": "user", "content": None}, "required", "e.content"),
        ({"role": "user", "content": "x", "type": "nope"}, "invalid_type", "e.type"),
        ({"role": "user", "content": "x" * (MAX_ENTRY_BYTES + 1)}, "entry_too_large", "e.content"),
    ]
    for spec, code, field in refused:
        with pytest.raises(DomainError) as error:
            entry_from_spec(thread=thread, spec=spec, parent_id=None, seq=1, now=now, field_prefix="e.")
        assert (error.value.code, error.value.field) == (code, field), spec
    # Long texts under the limit are measured, not refused.
    long = entry_from_spec(
        thread=thread, spec={"role": "user", "content": "y" * 500_000}, parent_id=None, seq=1, now=now
    )
    assert long.text == "y" * 500_000
