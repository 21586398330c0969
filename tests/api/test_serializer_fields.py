"""Input serializers copy their fields from a set made once per class (memoryapp.api.base): each
instance still binds fields of its own, and a child field answers to its own parent."""

from __future__ import annotations

from memoryapp.api.search import ContextInput


def test_each_instance_binds_fields_of_its_own() -> None:
    first = ContextInput(data={"max_tokens": 10}, context={"who": "first"})
    second = ContextInput(data={"max_tokens": 20}, context={"who": "second"})

    for name in ("max_tokens", "pinned", "partitions"):
        assert first.fields[name] is not second.fields[name]
        assert first.fields[name].parent is first and second.fields[name].parent is second
    # a list's child reaches its own serializer's context, not another instance's
    assert first.fields["pinned"].child.parent is first.fields["pinned"]
    assert first.fields["pinned"].child.context == {"who": "first"}
    assert second.fields["partitions"].child.context == {"who": "second"}


def test_a_change_to_one_instance_field_leaves_the_next_instance_alone() -> None:
    changed = ContextInput(data={})
    changed.fields["max_tokens"].allow_null = True

    fresh = ContextInput(data={"max_tokens": None})
    assert not fresh.is_valid()
    assert "max_tokens" in fresh.errors


def test_a_mutable_default_is_each_requests_own() -> None:
    """DRF puts a field's default itself into the validated data: a list default shared by every
    request would carry one request's change of it into the next."""
    from memoryapp.api.base import validated
    from memoryapp.api.threads import EntriesQuery

    first = validated(EntriesQuery, {})["types"]
    default = list(first)
    first.append("changed by a caller")
    second = validated(EntriesQuery, {})["types"]
    assert second == default
    assert second is not first
