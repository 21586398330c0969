"""A person's erasure deletes their memory files even when an item of the whole agent quotes lines
of them (review of 78f06a8): the quotes of those lines go, as a redacted version's do, and the
item left with no quote is purged; the erasure neither fails nor leaves the copied lines."""

from __future__ import annotations

from memoryapp.models import Evidence, MemoryFileVersion, MemoryItem
from tests.kit.api import Caller, create_memory_file, post_ok

NOTES = "# Ana\nAna is allergic to peanuts.\nShe lives in Porto.\n"


def test_an_erasure_takes_the_quotes_of_the_persons_file_lines(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", NOTES, "/api/v1/memory-tool?user_id=u-ana")
    version = MemoryFileVersion.objects.get(agent=alice.agent, path="/memories/ana.md", user_id="u-ana")
    lines = {"version_id": version.pk, "start_line": 2, "end_line": 2}
    shared = post_ok(
        alice.client,
        "/api/v1/items",
        {
            "kind": "fact",
            "subject": "peanuts",
            "attribute": "allergic person",
            "value": "someone on the team",
            "evidence": [{"file_range": lines, "quote": "allergic to peanuts"}],
        },
    )

    answer = post_ok(alice.client, "/api/v1/users/u-ana/forget", {}, status=200)

    assert answer["counts"]["file_versions"] == 1
    assert not MemoryFileVersion.objects.filter(agent=alice.agent, user_id="u-ana").exists()
    assert not Evidence.objects.filter(agent=alice.agent, quote__icontains="peanuts").exists()
    assert not MemoryItem.objects.filter(pk=shared["id"]).exists()
