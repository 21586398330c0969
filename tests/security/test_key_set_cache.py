"""A key set's key is cached per process like the data keys it is derived from, and for no longer:
a member key destroyed in another process stops opening the set's rows here once the member's own
cached copy would have gone (`_CACHE_SECONDS` after it was read), not a cache period later."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from governance.crypto import envelope
from governance.crypto.envelope import _CACHE_SECONDS, data_key_for, data_key_open, data_keys_forget
from governance.crypto.sealing import SealError
from memoryapp.models import Agent


@pytest.mark.django_db(transaction=True)
def test_a_key_set_stops_opening_when_a_member_destroyed_elsewhere_would(
    encrypted: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent.objects.create(slug="keyset-cache", name="keyset cache")
    carl = data_key_for(agent_id=agent.pk, user_id="u-carl")
    dora = data_key_for(agent_id=agent.pk, user_id="u-dora")
    key_set = f"{carl.id}+{dora.id}"
    clock = [1000.0]
    monkeypatch.setattr(envelope.time, "monotonic", lambda: clock[0])
    data_keys_forget()
    data_key_open(dora.id)  # read at 1000: cached until 1000 + _CACHE_SECONDS
    clock[0] += _CACHE_SECONDS - 1
    data_key_open(key_set)  # derived from Dora's cached copy
    # Another process destroys Dora's key (its register row; this process's caches are not told).
    with connection.cursor() as cursor:
        cursor.execute("UPDATE governance_datakey SET destroyed_at = %s WHERE id = %s", [timezone.now(), dora.id])
    clock[0] += 2  # past Dora's own cached copy
    with pytest.raises(SealError):
        data_key_open(dora.id)
    with pytest.raises(SealError):
        data_key_open(key_set)
