"""The subject index's scan reads each table in chunks, not a query per row (review of a99dd6f):
an item's texts include `value_json` and `metadata`, which the scan must load with the row."""

from __future__ import annotations

from typing import Any

from memoryapp.subjects.index import subject_index_rebuild
from tests.kit.api import Caller, post_item
from tests.kit.mentions import IDENTIFIERS, NAME, PERSON


def test_the_scan_of_many_items_costs_no_query_per_item(alice: Caller, django_assert_max_num_queries: Any) -> None:
    for n in range(30):
        post_item(alice, kind="fact", subject=f"Trip {n}", attribute="organiser", value=f"{NAME} plans trip {n}")
    assert alice.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json").status_code == 200

    with django_assert_max_num_queries(40):
        found = subject_index_rebuild(agent_id=alice.agent.pk, user_id=PERSON)

    assert len(found["item"]) == 30
