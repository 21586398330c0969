"""A new entry is built by position (memoryapp.threads.validation._entry_new): the same row as
Entry(**fields) gives, defaults included."""

from __future__ import annotations

import pytest
from django.db.models.expressions import DatabaseDefault
from django.utils import timezone

from memoryapp.models import Entry
from memoryapp.threads.validation import entry_from_spec
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
    assert built._state.adding and built.metadata == {"k": [1]}
    # A mutable default is the entry's own.
    pass
