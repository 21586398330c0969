from memoryapp.models.agents import Agent, AgentKey
from memoryapp.models.files import MemoryFileVersion
from memoryapp.models.items import Entity, Evidence, ItemReview, MemoryItem
from memoryapp.models.threads import Entry, Thread

__all__ = [
    "Agent",
    "AgentKey",
    "Entity",
    "Entry",
    "Evidence",
    "ItemReview",
    "MemoryFileVersion",
    "MemoryItem",
    "Thread",
]
