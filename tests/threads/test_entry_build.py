"""A new entry is built with its values put in place (memoryapp.threads.validation._entry_new): the
same row as Entry(**fields) gives, defaults included, without Model.__init__."""

from __future__ import annotations

import pytest
from django.db.models.expressions import DatabaseDefault
from django.db.models.signals import post_init, pre_init
from django.utils import timezone

from memoryapp.models import Entry
from memoryapp.threads.validation import _entry_new, entry_from_spec
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
