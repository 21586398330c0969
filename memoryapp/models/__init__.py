from memoryapp.models.agents import Agent, AgentKey
from memoryapp.models.consolidation import (
    ConsolidationPass,
    ConsolidationState,
    EntityOverview,
    PlaybookDraft,
    StaleItem,
)
from memoryapp.models.events import Event, EventCounter, Webhook, WebhookDelivery
from memoryapp.models.files import MemoryFileVersion
from memoryapp.models.items import Entity, Evidence, ItemReview, MemoryItem
from memoryapp.models.retention import LegalHold, RetentionPolicy
from memoryapp.models.threads import Entry, Thread

__all__ = [
    "Agent",
    "AgentKey",
    "ConsolidationPass",
    "ConsolidationState",
    "Entity",
    "EntityOverview",
    "Entry",
    "Event",
    "EventCounter",
    "Evidence",
    "ItemReview",
    "LegalHold",
    "MemoryFileVersion",
    "MemoryItem",
    "PlaybookDraft",
    "RetentionPolicy",
    "StaleItem",
    "Thread",
    "Webhook",
    "WebhookDelivery",
]
