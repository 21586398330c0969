"""The overview on the admin index, per role (Django test client), and its server-drawn charts."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone
from freezegun import freeze_time

from governance.audit.chain import audit_append, audit_verify_tail
from governance.console.activity import entries_per_agent_per_day, window_days
from governance.console.charts import Duration, Series, duration_bars, nice_ceiling, stacked_bars_by_day
from governance.models import AuditRecord, ErasureRequest, JobRun
from memoryapp.models import Entry, MemoryItem
from memoryapp.threads.services import entries_add, entry_add, thread_create
from tests.kit.api import Caller
from tests.kit.review_staff import food_talk, staff, suggest

pytestmark = pytest.mark.django_db

INDEX = "/admin/"


@pytest.fixture(autouse=True)
def fresh_figures() -> None:
    cache.clear()  # the chart figures are cached for two minutes


def _sections(page: str) -> set[str]:
    return set(re.findall(r'<section class="ov-section[^"]*" id="ov-(\w+)"', page))


@pytest.mark.parametrize(
    ("role", "sections"),
    [
        ("reviewer", {"review"}),
        ("privacy", {"privacy", "retention"}),
        ("operator", {"operator", "retention"}),
        (None, set()),
    ],
)
def test_each_role_sees_its_own_section_of_the_overview(role: str | None, sections: set[str]) -> None:
    page = staff(role).get(INDEX)
    assert page.status_code == 200
    assert _sections(page.content.decode()) == sections


def test_a_superuser_sees_every_section() -> None:
    page = staff(superuser=True, name="root").get(INDEX).content.decode()
    assert _sections(page) == {"review", "privacy", "operator", "retention"}


def test_reviewers_see_the_backlog_its_oldest_age_and_the_way_to_the_queue(alice: Caller, bob: Caller) -> None:
    _, answer = food_talk(alice.agent)
    old = suggest(alice.agent, answer)
    MemoryItem.objects.filter(pk=old.pk).update(recorded_at=timezone.now() - timedelta(days=3, hours=2))
    suggest(alice.agent, answer, value="Porto", attribute="city")
    suggest(bob.agent, None, value="Leeds", attribute="city", subject="Ben", user_id="u-ben")
    page = staff("reviewer").get(INDEX).content.decode()
    assert "<b>3</b> suggestions waiting" in page
    assert re.search(r'id="ov-oldest"[^>]*>3\xa0days, 2\xa0hours<', page)
    assert 'href="/admin/memoryapp/memoryitem/review/?order=oldest"' in page
    assert f'href="/admin/memoryapp/memoryitem/review/?agent={alice.agent.pk}&amp;order=oldest"' in page


def test_privacy_officers_see_the_audit_state_and_recent_removals(alice: Caller) -> None:
    for _ in range(2):
        audit_append(action="entry.redact", actor="staff:pia", agent_id=alice.agent.pk)
    audit_append(action="thread.delete", actor="staff:pia", agent_id=alice.agent.pk)
    with freeze_time(timezone.now() + timedelta(days=30)):  # what follows is read a month later
        client = staff("privacy")
        audit_append(action="thread.delete", actor="staff:pia", agent_id=alice.agent.pk)
        page = client.get(INDEX).content.decode()
        ErasureRequest.objects.create(user_id="u-ana", status="failed")
        ErasureRequest.objects.create(user_id="u-ben", status="done")
        with_requests = client.get(INDEX).content.decode()
    assert "Erasure requests</a>:\n    none waiting, running, failed or blocked." in page
    assert 'href="/admin/governance/erasurerequest/">Erasure requests</a>:\n    1 failed.' in with_requests
    records = AuditRecord.objects.count()
    assert f"the newest {records} of {records} records link and hash correctly" in page
    removals = page[page.index('id="ov-removals"') :]
    assert re.search(r"entries redacted</a></td><td class=\"ov-num\">0<", removals)  # a month ago
    assert re.search(r"threads deleted</a></td><td class=\"ov-num\">1<", removals)
    assert 'href="/admin/governance/auditrecord/?action__exact=entry.redact"' in removals
    assert client.get("/admin/governance/auditrecord/?action__exact=entry.redact").status_code == 200


def test_a_changed_audit_record_shows_the_chain_broken_on_the_overview(alice: Caller) -> None:
    for n in range(3):
        audit_append(action="item.written", actor="x", subject=f"mem_{n}")
    tampered = AuditRecord.objects.get(subject="mem_1")
    AuditRecord.objects.filter(pk=tampered.pk).update(outcome="tampered")
    assert audit_verify_tail(records=500).first_broken == tampered.seq
    page = staff("privacy").get(INDEX).content.decode()
    assert f"Audit chain BROKEN at seq {tampered.seq}" in page


def test_an_anchor_past_the_chains_end_shows_in_the_tail_check(
    alice: Caller, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):  # anchors are written on commit
        for n in range(3):
            audit_append(action="item.written", actor="x", subject=f"mem_{n}")
    newest = AuditRecord.objects.order_by("-seq").first()
    assert newest is not None
    newest.delete()  # the newest record cut off: its anchor still names it
    result = audit_verify_tail(records=500)
    assert (result.ok, result.first_broken) == (False, newest.seq)


def test_operators_see_failures_of_the_last_day_health_and_four_charts(alice: Caller) -> None:
    now = timezone.now()
    for kind, status, took in [("extraction", "failed", 3), ("extraction", "succeeded", 1), ("embedding", "failed", 2)]:
        JobRun.objects.create(kind=kind, status=status, started_at=now - timedelta(seconds=took), finished_at=now)
    stale = JobRun.objects.create(kind="compaction", status="failed")
    JobRun.objects.filter(pk=stale.pk).update(created_at=now - timedelta(days=2))  # failed before the last day
    client = staff("operator")
    page = client.get(INDEX).content.decode()
    assert "<b>2</b> job runs failed in the last 24 hours" in page and "embedding 1, extraction 1" in page
    failures = re.search(r'href="([^"]+)" id="ov-failures"', page)
    assert failures and "status__exact=failed" in failures.group(1)
    assert client.get(failures.group(1).replace("&amp;", "&")).status_code == 200
    assert "<b>database</b>: answers" in page and "<b>broker (Redis ping)</b>: answers" in page
    assert page.count('<svg class="ch-svg"') == 4
    assert "extraction · p95: 2.90 s over 2 runs" in page  # (1 s, 3 s): p95 interpolated


def test_the_overview_says_when_the_broker_does_not_answer(settings) -> None:
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    page = staff("operator").get(INDEX).content.decode()
    assert "<b>broker (Redis ping)</b>: DOWN" in page


def test_entries_are_counted_per_agent_per_utc_day_they_were_stored(alice: Caller, bob: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t-a")
    other = thread_create(agent=bob.agent, external_id="t-b")
    today = timezone.now()
    for number, target in enumerate((thread, thread, other, other)):
        # distinct turns: the same turn at the same client-given time is one node (a retried write)
        entry_add(thread=target, role="user", content=f"hello {number}", created_at=today)
    yesterday = entry_add(thread=other, role="user", content="stored yesterday", created_at=today)
    Entry.objects.filter(pk=yesterday.pk).update(stored_at=today - timedelta(days=1))
    old = entry_add(thread=thread, role="user", content="too old", created_at=today)
    Entry.objects.filter(pk=old.pk).update(stored_at=today - timedelta(days=40))
    # stored before the column existed: its created_at is all that is known
    before = entry_add(thread=other, role="user", content="long ago", created_at=today - timedelta(days=1))
    Entry.objects.filter(pk=before.pk).update(stored_at=None)
    figures = entries_per_agent_per_day(days=30)
    assert len(figures.days) == 30 and figures.days[-1] == today.date()
    series = dict(figures.series)
    assert series["alice"][-1] == 2 and sum(series["alice"]) == 2
    assert series["bob"][-2:] == [2, 2]
    assert Entry.objects.count() == 7  # the old one is there, outside the window
    page = staff("operator", name="op2").get(INDEX).content.decode()
    assert f"{today.date().isoformat()} · alice: 2 entries" in page


def test_an_import_of_old_conversations_counts_on_the_day_it_was_stored(alice: Caller) -> None:
    """1,500 entries dated 2023 written today (the batch's COPY, and one by one): today's bar."""
    thread = thread_create(agent=alice.agent, external_id="t-2023")
    dated = timezone.now().replace(year=2023)
    for batch in range(15):
        turns = [{"role": "user", "content": f"back then {batch}.{n}", "created_at": dated} for n in range(99)]
        entries_add(thread=thread, entries=turns)
    for n in range(15):
        entry_add(thread=thread, role="assistant", content=f"then {n}", created_at=dated)
    assert Entry.objects.filter(created_at__year=2023, stored_at__isnull=False).count() == 1500
    series = dict(entries_per_agent_per_day(days=30).series)
    assert series["alice"][-1] == 1500 and sum(series["alice"]) == 1500


def test_a_stacked_chart_has_axes_labels_a_legend_and_escapes_names() -> None:
    _, days = window_days(days=30)
    svg = str(
        stacked_bars_by_day(
            title="Entries <per> day",
            days=days,
            series=[Series("a<b", [1] * 30), Series("c", [0] * 29 + [7])],
            unit="entries",
        )
    )
    assert "<title>Entries &lt;per&gt; day</title>" in svg and "a&lt;b" in svg and "a<b" not in svg
    assert svg.count("<rect") == 31  # a bar piece per value that is not 0
    assert ">10<" in svg and ">5<" in svg and ">0<" in svg  # the y axis: 0, half, a nice top
    assert svg.count('text-anchor="middle"') == 7  # a date every fifth day and the last
    assert '<ul class="ch-legend">' in svg and "30 entries" in svg and "7 entries" in svg


def test_job_durations_are_drawn_per_kind_with_median_and_p95() -> None:
    svg = str(duration_bars(title="Durations", rows=[Duration("embedding", 10, 0.5, 2.0)]))
    assert "embedding (10)" in svg and "0.50 s" in svg and "2.00 s" in svg and "median (p50)" in svg
    assert "No run finished" in str(duration_bars(title="Durations", rows=[]))


@pytest.mark.parametrize(("value", "top"), [(0, 1), (1, 1), (3, 5), (7, 10), (12, 20), (240, 250), (0.3, 0.5)])
def test_the_axis_top_is_a_round_number_at_or_above_the_largest_value(value: float, top: float) -> None:
    assert nice_ceiling(value) == pytest.approx(top)
