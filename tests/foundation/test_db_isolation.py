"""Every statement runs READ COMMITTED, whatever the database's default, in autocommit too.

Django's `isolation_level` option only sets the `BEGIN` of an `atomic` block; a statement in
autocommit (the single append's one statement, which locks its thread) ran at the database's
`default_transaction_isolation`. Under REPEATABLE READ, 42 of 100 appends of four clients to one
thread were 503s (serialization failures). The backend sets the session's default on each new
connection (memory_project/postgres/base.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from django.db import connection, connections, transaction
from rest_framework.test import APIClient

from tests.kit.api import THREADS, Caller, post_thread
from tests.kit.concurrency import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def _isolation() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW transaction_isolation")
        return str(cursor.fetchone()[0])


@pytest.fixture
def repeatable_read_by_default() -> Iterator[None]:
    """The test database's default is REPEATABLE READ for every connection opened after this."""
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = 'repeatable read'")
    connection.close()
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{name}" RESET default_transaction_isolation')
        connection.close()


def test_a_statement_in_autocommit_is_read_committed(repeatable_read_by_default: None) -> None:
    assert _isolation() == "read committed"
    with transaction.atomic():
        assert _isolation() == "read committed"
    with connection.cursor() as cursor:
        cursor.execute("SHOW default_transaction_isolation")
        assert cursor.fetchone()[0] == "read committed"


def test_concurrent_single_appends_to_one_thread_all_land(alice: Caller, repeatable_read_by_default: None) -> None:
    post_thread(alice, "t-1")

    def appender(n: int) -> Counter[int]:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {alice.key}")
        statuses: Counter[int] = Counter()
        try:
            for i in range(25):
                response = client.post(
                    f"{THREADS}/t-1/entries", {"role": "user", "content": f"turn {n} {i}"}, format="json"
                )
                statuses[response.status_code] += 1
        finally:
            connections.close_all()
        return statuses

    results = in_threads(*(lambda n=n: appender(n) for n in range(4)))
    assert sum(results, Counter()) == Counter({201: 100})
