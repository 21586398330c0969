"""An agent's busy policy and abuse limits on its admin page: Operators change them (audited with
the old and new values), Reviewers cannot."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from governance.models import AuditRecord
from memoryapp.models import Agent, AgentKey
from tests.kit.admin import staff_client
from tests.kit.api import Caller


def agent_form(caller: Caller, **limits: str) -> dict[str, Any]:
    agent = caller.agent
    key = AgentKey.objects.get(agent=agent)
    return {
        "slug": agent.slug,
        "name": agent.name,
        "active": "on",
        "shadow_mode": "on",
        "playbook_shadow_mode": "on",
        "on_busy": "wait",
        "busy_timeout_seconds": "60",
        "rate_limit_per_minute": "",
        "rate_limit_burst": "",
        "heavy_concurrency": "",
        **limits,
        "keys-TOTAL_FORMS": "1",
        "keys-INITIAL_FORMS": "1",
        "keys-MIN_NUM_FORMS": "0",
        "keys-MAX_NUM_FORMS": "1000",
        "keys-0-id": str(key.pk),
        "keys-0-agent": str(agent.pk),
    }


def test_an_operator_sets_an_agents_limits_and_the_change_is_audited(alice: Caller) -> None:
    staff = staff_client(username="olga", groups=("Operators",))
    page = staff.get(reverse("admin:memoryapp_agent_change", args=[alice.agent.pk])).content.decode()
    assert 'name="rate_limit_per_minute"' in page and 'name="on_busy"' in page
    form = agent_form(alice, on_busy="reject", rate_limit_per_minute="120", heavy_concurrency="2")
    answer = staff.post(reverse("admin:memoryapp_agent_change", args=[alice.agent.pk]), form)
    assert answer.status_code == 302
    agent = Agent.objects.get(pk=alice.agent.pk)
    assert (agent.on_busy, agent.rate_limit_per_minute, agent.heavy_concurrency) == ("reject", 120, 2)
    record = AuditRecord.objects.get(action="agent.limits_set")
    assert record.actor == "staff:olga"
    assert record.details == {
        "from": {"on_busy": "wait", "rate_limit_per_minute": None, "heavy_concurrency": None},
        "to": {"on_busy": "reject", "rate_limit_per_minute": 120, "heavy_concurrency": 2},
    }
    # Saved again unchanged: nothing more in the audit.
    staff.post(reverse("admin:memoryapp_agent_change", args=[alice.agent.pk]), {**form, "name": "renamed"})
    assert AuditRecord.objects.filter(action="agent.limits_set").count() == 1


def test_a_reviewer_cannot_change_an_agents_limits(alice: Caller) -> None:
    staff = staff_client(groups=("Reviewers",))
    form = agent_form(alice, on_busy="interrupt", rate_limit_per_minute="1")
    answer = staff.post(reverse("admin:memoryapp_agent_change", args=[alice.agent.pk]), form)
    assert answer.status_code == 403
    agent = Agent.objects.get(pk=alice.agent.pk)
    assert (agent.on_busy, agent.rate_limit_per_minute) == ("wait", None)
    assert not AuditRecord.objects.filter(action="agent.limits_set").exists()
