"""Screening at write: what an agent writes is looked through for personal data and secrets
before anything is stored, embedded or sent to a model, and each category is allowed, redacted,
held or refused as the agent's policy says (issue 25 §3). Also the registry of the people an
agent's memory is about and their identifiers (issue 25 §1), which screening finds in texts as
the category `person`.

- `recognizers`: the detectors (Presidio's pattern recognisers, phonenumbers, detect-secrets).
- `policy`: the categories, actions and defaults; an agent's policy, read and set.
- `identifiers`: the registry (normalised, sealed, looked up by blind index).
- `screen`: the screener the write paths call, and the audit of its decisions.
"""
