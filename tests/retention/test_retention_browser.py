"""In a real headless Chromium: an operator sets a 30-day thread TTL for one agent, runs a dry run,
reads its report, then runs the prune and reads what it did."""

from __future__ import annotations

from typing import Any

import pytest

from governance.models import JobRun
from governance.retention.services import PRUNE_JOB_KIND
from governance.tasks import retention_prune_job
from memoryapp.models import RetentionPolicy, Thread
from tests.kit.browser import BROWSER_TEST, in_another_thread, log_in, shoot, staff_user
from tests.kit.factories import AgentFactory
from tests.retention.world import aged_thread

pytestmark = [*BROWSER_TEST, pytest.mark.django_db(transaction=True)]


def test_an_operator_sets_a_thread_ttl_for_one_agent_dry_runs_reads_the_report_and_prunes(
    live_server: Any, chromium: Any
) -> None:
    alice = AgentFactory(slug="alice")
    bob = AgentFactory(slug="bob")
    for n in range(3):
        aged_thread(alice, f"alice-old-{n}", days=40 + n)
    aged_thread(alice, "alice-recent", days=10)
    aged_thread(bob, "bob-old", days=400)
    staff_user("olivia", role="operator")

    with chromium() as browser:
        page = log_in(browser, live_server, "olivia", then="/admin/memoryapp/retentionpolicy/add/")
        page.goto(f"{live_server.url}/admin/memoryapp/retentionpolicy/add/")
        page.select_option("#id_agent", label="alice")
        page.fill("#id_thread_ttl_days", "30")
        page.click("input[name=_save]")
        page.wait_for_selector(".messagelist .success")
        assert "alice" in page.locator("#result_list").inner_text()

        page.click("#prune-link")
        page.select_option("#prune-agent", "alice")
        page.click("#prune-dry")
        page.wait_for_selector("#dry-report")
        title = page.locator("#dry-report-title").inner_text()
        assert title.startswith("Dry run for alice")
        assert page.locator('#dry-report tr[data-kind="threads_deleted"] td.n').inner_text() == "3"
        assert page.locator('#dry-report tr[data-kind="thread_entries_deleted"] td.n').inner_text() == "9"
        listed = page.locator("#dry-threads code").all_inner_texts()
        assert listed == ["alice-old-0", "alice-old-1", "alice-old-2"]
        shoot(page, "retention-dry-run")

        page.click("#prune-run")
        page.wait_for_selector("#run-title")
        run_id = int(page.url.rsplit("run=", 1)[1])
        if "succeeded" not in page.locator("#run-title").inner_text():
            # What a worker of the governance queue does with the run (tests send tasks eagerly:
            # then it ran as the request committed).
            in_another_thread(lambda: retention_prune_job(run_id))
            page.reload()
        assert "succeeded" in page.locator("#run-title").inner_text()
        assert page.locator('#run-report tr[data-kind="threads_deleted"] td.n').inner_text() == "3"
        # Pruned, a thread is named by its owner's pseudonym, as in the audit chain, never its id.
        pruned = page.locator("#run-threads code").all_inner_texts()
        assert len(pruned) == len(listed) and all(name.startswith("psn_") for name in pruned)
        shoot(page, "retention-prune-done")

    assert RetentionPolicy.objects.get().agent == alice
    assert sorted(Thread.objects.values_list("external_id", flat=True)) == ["alice-recent", "bob-old"]
    run = JobRun.objects.get(kind=PRUNE_JOB_KIND)
    assert run.arguments["agent"] == "alice" and run.arguments["actor"] == "staff:olivia"
    assert bob.pk and run.result["counts"]["threads_deleted"] == 3
