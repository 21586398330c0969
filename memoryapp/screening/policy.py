"""An agent's screening policy: one action per category (README "Screening at write").

`allow` stores the text as it is; `redact` replaces each span by a typed placeholder (`[email]`)
before anything is stored, embedded or sent to a model, so the original is never written;
`hold` stores the write but keeps it out of search, context and extraction until a reviewer
releases or deletes it (entries and items; a write that cannot be held is refused); `refuse`
answers 422 `sensitive_data` naming the category and the field, and stores nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from governance.audit.chain import audit_append
from memoryapp.errors import DomainError
from memoryapp.models import Agent
from memoryapp.screening.recognizers import CATEGORIES, PAYMENT_CARD, SECRET

ALLOW = "allow"
REDACT = "redact"
HOLD = "hold"
REFUSE = "refuse"
ACTIONS = (ALLOW, REDACT, HOLD, REFUSE)

# Secrets are refused and card numbers redacted unless the agent says otherwise; the rest allowed.
DEFAULTS: dict[str, str] = {category: ALLOW for category in CATEGORIES} | {SECRET: REFUSE, PAYMENT_CARD: REDACT}

LABELS = {
    "email": "an e-mail address",
    "phone": "a phone number",
    "payment_card": "a payment card number",
    "iban": "an IBAN",
    "national_id": "a national id number",
    "ip_address": "an IP address",
    "secret": "a credential or secret",
    "person": "an identifier of a registered person",
}


def policy_effective(stored: Any) -> dict[str, str]:
    """The action of every category: the agent's own (`Agent.screening`) over the defaults. A stored
    value that is not a known action (an older build's) falls back to the default."""
    own = stored if isinstance(stored, dict) else {}
    return {
        category: own[category] if own.get(category) in ACTIONS else default for category, default in DEFAULTS.items()
    }


def policy_changes_check(values: Any) -> dict[str, str]:
    """The categories and actions of a PATCH, checked: a 400 naming the field on a bad one."""
    if not isinstance(values, dict):
        raise DomainError("invalid_type", "The body must be an object of category: action.", field="body")
    checked: dict[str, str] = {}
    for category, action in values.items():
        if category not in DEFAULTS:
            raise DomainError(
                "unknown_field", f"{category} is not a category; one of {', '.join(CATEGORIES)}.", field=str(category)
            )
        if action not in ACTIONS:
            raise DomainError("invalid_value", f"{category} must be one of {', '.join(ACTIONS)}.", field=category)
        checked[category] = action
    return checked


@transaction.atomic
def screening_policy_set(*, agent: Agent, values: Any, actor: str) -> dict[str, str]:
    """Set some categories' actions (the others keep theirs); audited with what changed (names and
    actions only). Returns the effective policy."""
    changes = policy_changes_check(values)
    locked = Agent.objects.select_for_update().only("id", "screening").get(pk=agent.pk)
    before = policy_effective(locked.screening)
    own = dict(locked.screening) if isinstance(locked.screening, dict) else {}
    own.update(changes)
    Agent.objects.filter(pk=agent.pk).update(screening=own)
    agent.screening = own
    after = policy_effective(own)
    changed = {category: after[category] for category in after if after[category] != before[category]}
    if changed:
        audit_append(
            action="screening.policy_set",
            actor=actor,
            agent_id=agent.pk,
            subject=agent.slug,
            outcome="changed",
            details={"changed": changed},
        )
    return after
