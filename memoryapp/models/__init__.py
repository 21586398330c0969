from memoryapp.models.agents import Agent, AgentKey, ScreeningSettings
from memoryapp.models.choices import OnBusy
from memoryapp.models.compaction import CompactionSettings
from memoryapp.models.consolidation import (
    ConsolidationPass,
    ConsolidationState,
    EntityOverview,
    PlaybookDraft,
    StaleItem,
)
from memoryapp.models.events import Event, EventCounter, Webhook, WebhookDelivery
from memoryapp.models.files import MemoryFileVersion
from memoryapp.models.graph import Relation, RelationEvidence
from memoryapp.models.items import Entity, Evidence, ItemReview, MemoryItem
from memoryapp.models.knowledge import KnowledgeChunk, KnowledgeDocument
from memoryapp.models.people import ErasureMark, IdentifierKind, PersonIdentifier, SubjectMention
from memoryapp.models.retention import LegalHold, RetentionPolicy
from memoryapp.models.runs import AccessLog, RunEvent, ThreadRun
from memoryapp.models.sessions import ChannelSession
from memoryapp.models.space import VectorSpace
from memoryapp.models.threads import Entry, HeldEntry, Thread

__all__ = [
    "AccessLog",
    "Agent",
    "AgentKey",
    "ChannelSession",
    "CompactionSettings",
    "ConsolidationPass",
    "ConsolidationState",
    "Entity",
    "EntityOverview",
    "Entry",
    "ErasureMark",
    "Event",
    "EventCounter",
    "Evidence",
    "HeldEntry",
    "IdentifierKind",
    "ItemReview",
    "KnowledgeChunk",
    "KnowledgeDocument",
    "LegalHold",
    "MemoryFileVersion",
    "MemoryItem",
    "OnBusy",
    "PersonIdentifier",
    "PlaybookDraft",
    "Relation",
    "RelationEvidence",
    "RetentionPolicy",
    "RunEvent",
    "ScreeningSettings",
    "StaleItem",
    "SubjectMention",
    "Thread",
    "ThreadRun",
    "VectorSpace",
    "Webhook",
    "WebhookDelivery",
]
