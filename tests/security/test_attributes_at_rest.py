"""Item attributes, fact keys and fact namespaces with encryption on: what a dump of the database
shows of them, and what the erasure's receipt says of it.

They are read in SQL (a slot is its subject's hash and its attribute; a fact is found by namespace
and key, a namespace's facts by prefix, the admin searches part of an attribute), so they are not
sealed: a dump shows them as written. The item's subject is sealed, but a fact's subject is its
namespace, which its `namespace` column holds beside it in clear: docs/security.md listed a fact's
namespace among what a dump cannot learn. The receipt measures what an old copy reads (the columns
of each row as the erasure found them) and names both columns as plaintext."""

from __future__ import annotations

from typing import Any

from governance.erasure.services import erasure_request_file
from governance.models import ErasureRequest
from memoryapp.items.facts import fact_remember
from memoryapp.items.services import item_write
from tests.kit.api import Caller
from tests.kit.crypto import pg_dump
from tests.kit.servers import database_conninfo

NAMESPACE = "users/u-ines/zorbaxcontacts"
KEY = "quillvexescalation"
ATTRIBUTE = "plumvortexcolleague"
VALUE = "Yarrowmint"  # sealed: never in a dump


def test_a_dump_shows_attributes_fact_keys_and_namespaces_and_the_receipt_says_so(
    encrypted: Any, transactional_db: None, alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    fact_remember(agent=alice.agent, namespace=NAMESPACE, key=KEY, value=f"{VALUE} desk", actor="test")
    item_write(
        agent=alice.agent,
        kind="fact",
        subject="Lisbon trip",
        attribute=ATTRIBUTE,
        value=f"{VALUE} Valdomiro",
        trust="system",
        user_id="u-ines",
    )
    before = pg_dump(database_conninfo())
    assert VALUE not in before and "Lisbon trip" not in before  # values and subjects are sealed
    for plain in (NAMESPACE, KEY, ATTRIBUTE):  # read in SQL, so in clear
        assert plain in before, plain

    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id="u-ines", identifiers=[], actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    shredding = request.report["crypto_shredding"]
    readable = {
        (r["column"], r["why"]) for r in shredding["backup"]["readable"] if r["table"] == "memoryapp_memoryitem"
    }
    assert {("attribute", "plaintext"), ("namespace", "plaintext")} <= readable, readable
    assert "memoryapp_memoryitem.attribute: 2 (plaintext)" in shredding["statement"], shredding["statement"]
    assert "memoryapp_memoryitem.namespace: " in shredding["statement"], shredding["statement"]
    shut = {r["column"] for r in shredding["backup"]["unopenable"] if r["table"] == "memoryapp_memoryitem"}
    assert {"subject", "value"} <= shut
    after = pg_dump(database_conninfo())
    assert not any(plain in after for plain in (NAMESPACE, KEY, ATTRIBUTE))
