"""The admin of the memory domain, one module per area (Django's autodiscovery imports this package)."""

from memoryapp.admin import agents, consolidation, events, files, items, screening, threads  # noqa: F401
