from memoryapp.models.agents import Agent, AgentKey
from memoryapp.models.files import MemoryFileVersion
from memoryapp.models.items import Entity, Evidence, MemoryItem
from memoryapp.models.threads import Entry, Thread

__all__ = ["Agent", "AgentKey", "Entity", "Entry", "Evidence", "MemoryFileVersion", "MemoryItem", "Thread"]
