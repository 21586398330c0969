"""The governance pages ask the database the same number of questions at 20 rows and at 500: a
cell that looks something up per row (an agent's slug, a count) shows as a page whose queries
grow with its list (tests/kit/governance_rows.py fills the tables)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.kit.admin import staff_client
from tests.kit.governance_rows import GovernanceRows, governance_rows

pytestmark = pytest.mark.django_db

PAGES = {
    "erasure list": lambda rows: "/admin/governance/erasurerequest/",
    "erasure page": lambda rows: f"/admin/governance/erasurerequest/{rows.finished_erasure.pk}/change/",
    "erasure report": lambda rows: f"/admin/governance/erasurerequest/{rows.finished_erasure.pk}/report/",
    "export list": lambda rows: "/admin/governance/exportrequest/",
    "export page": lambda rows: f"/admin/governance/exportrequest/{rows.finished_export.pk}/change/",
    "legal holds": lambda rows: "/admin/memoryapp/legalhold/",
    "retention policies": lambda rows: "/admin/memoryapp/retentionpolicy/",
    "compaction settings": lambda rows: "/admin/memoryapp/compactionsettings/",
    "job runs": lambda rows: "/admin/governance/jobrun/",
    "schedules": lambda rows: "/admin/governance/jobrun/schedules/",
    "item uses": lambda rows: f"/admin/memoryapp/memoryitem/{rows.item.pk}/change/",
    "erasure form": lambda rows: "/admin/governance/erasurerequest/add/",
    "legal hold form": lambda rows: "/admin/memoryapp/legalhold/add/",
    "compaction form": lambda rows: f"/admin/memoryapp/compactionsettings/{rows.agents[1].pk}/change/",
    "staff overview": lambda rows: "/admin/",
}


@pytest.fixture(autouse=True)
def var_dir(tmp_path: Path, settings: Any) -> None:
    settings.VAR_DIR = tmp_path / "var"
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""


def _queries(rows: GovernanceRows, url: str) -> int:
    client = staff_client(is_superuser=True)
    client.get(url)  # the session, the content types and the like: asked once, then cached
    cache.clear()  # the overview keeps its figures a while: both sizes are counted from the database
    with CaptureQueriesContext(connection) as asked:
        answer = client.get(url)
    assert answer.status_code == 200, url
    return len(asked)


@pytest.mark.parametrize("page", PAGES)
def test_a_governance_page_asks_as_many_queries_at_500_rows_as_at_20(page: str, django_db_blocker: Any) -> None:
    few = governance_rows(20)
    at_twenty = _queries(few, PAGES[page](few))
    many = governance_rows(500, batch="us")
    at_500 = _queries(many, PAGES[page](many))
    assert at_500 == at_twenty, f"{page}: {at_twenty} queries at 20 rows, {at_500} at 500"
