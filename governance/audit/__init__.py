"""The audit trail (a leaf: it imports nothing of memoryapp).

- chain: `audit_append` writes a record in the caller's transaction (ids, names, outcomes, never
  content), chained by hash and anchored outside the database; `audit_verify` checks the chain.

Its admin page (the list and the verify view) is in `governance.console.admin`.
"""
