"""No role meets a dead end: from the start page, every admin link a role is shown (followed three
pages deep over a small world of every kind of row) opens for that role; none answers 403."""

from __future__ import annotations

import re
from collections import deque
from html import unescape
from urllib.parse import urldefrag

import pytest

from governance.models import JobRun
from memoryapp.models import LegalHold, Webhook
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.factories import MemoryFileVersionFactory, MemoryItemFactory, ThreadFactory

pytestmark = pytest.mark.django_db

# Links that are not pages to open (they act, or leave the admin).
SKIP = re.compile(r"/logout/|/password_change/|/delete/|/retry/|/compact/|/extract/|/archive/|/revoke|/decide|/jsi18n")


def _world(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-1", user_id="u-ana", turns=[("user", "hi")] * 2)
    MemoryItemFactory(agent=alice.agent, user_id="u-ana", value="vegetarian")
    MemoryFileVersionFactory(agent=alice.agent, user_id="u-ana", path="/memories/ana.md")
    JobRun.objects.create(kind="extraction", status="failed", agent_id=alice.agent.pk, arguments={"thread_id": "t-1"})
    JobRun.objects.create(
        kind="compaction", status="succeeded", agent_id=alice.agent.pk, arguments={"thread_pk": thread.pk}
    )
    LegalHold.objects.create(user_id="u-ana", reason="litigation", placed_by="staff:pat")
    Webhook.objects.create(agent=alice.agent, url="https://hooks.example.org/x", secret="s")


@pytest.mark.parametrize("group", ["Operators", "Reviewers", "Privacy officers"])
def test_every_link_a_role_is_shown_opens_for_that_role(alice: Caller, group: str) -> None:
    _world(alice)
    client = staff_client(username="staffer", groups=(group,))
    seen: set[str] = set()
    queue = deque([("/admin/", 0, "")])
    refused: list[tuple[str, str]] = []
    while queue and len(seen) < 400:
        url, depth, source = queue.popleft()
        if url in seen:
            continue
        seen.add(url)
        answer = client.get(url)
        if answer.status_code == 403:
            refused.append((url, source))
            continue
        if depth >= 3 or answer.status_code != 200 or "html" not in answer.get("Content-Type", ""):
            continue
        for href in re.findall(r'href="([^"]+)"', answer.content.decode()):
            link = urldefrag(unescape(href))[0]
            if link.startswith("/admin/") and not SKIP.search(link) and link not in seen:
                queue.append((link, depth + 1, url))
    assert len(seen) > 10
    assert refused == [], f"{group} is shown links that answer 403 (link, on page): {refused}"
