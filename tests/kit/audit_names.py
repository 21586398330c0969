"""How the audit trail names a person's ids (governance.audit.pseudonyms), for tests that look a
record up by its thread id or subject."""

from __future__ import annotations

from governance.audit.pseudonyms import pseudonyms_of


def audit_name(*, agent_id: int | None, user_id: str, value: str) -> str:
    """`value` as the audit trail writes it in a record about `user_id`: its pseudonym while the
    person's secret lives; as it is for a record about no one."""
    names = pseudonyms_of(agent_id=agent_id, user_id=user_id, values=[value]) if user_id else []
    return names[0] if names else value
