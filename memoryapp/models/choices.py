from django.db import models


class Trust(models.TextChoices):
    SYSTEM = "system"
    USER = "user"
    MODEL = "model"
    TOOL = "tool"
    WEB = "web"


# Most trusted first: a lower rank is a better source.
TRUST_RANK = {Trust.SYSTEM: 0, Trust.USER: 1, Trust.MODEL: 2, Trust.TOOL: 3, Trust.WEB: 4}


class EntryType(models.TextChoices):
    MESSAGE = "message"
    TOOL_RESULT = "tool_result"
    MODEL_CHANGE = "model_change"
    COMPACTION = "compaction"
    APPROVAL = "approval"
    INTERRUPT = "interrupt"
    LABEL = "label"
    CUSTOM = "custom"


HISTORY_TYPES = (EntryType.MESSAGE, EntryType.TOOL_RESULT)
EVENT_TYPES = tuple(t for t in EntryType if t not in HISTORY_TYPES)


class Role(models.TextChoices):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ItemKind(models.TextChoices):
    FACT = "fact"
    EVENT = "event"
    PREFERENCE = "preference"
    INSTRUCTION = "instruction"
    OPINION = "opinion"
    LESSON = "lesson"


class ItemStatus(models.TextChoices):
    SUGGESTED = "suggested"
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    STALE = "stale"
    REJECTED = "rejected"


class EvidenceStatus(models.TextChoices):
    VERIFIED = "verified"
    SUGGESTED = "suggested"


class FileAuthor(models.TextChoices):
    MEMORY = "memory"
    USER = "user"
    MODEL = "model"
    SYSTEM = "system"


class OnBusy(models.TextChoices):
    """002 `onBusy`: what a second run on a thread that is already running does."""

    WAIT = "wait"
    REJECT = "reject"
    INTERRUPT = "interrupt"


class AutoCompactionStrategy(models.TextChoices):
    """The strategies an agent may have compact its threads automatically (memoryapp.compaction.plan
    names them; `custom` is left out: it is a Python callable a request names, not a setting)."""

    SUMMARIZE = "summarize-old-preserve-recent"
    CLEAR_TOOL_RESULTS = "clear-old-tool-results"
    HIERARCHICAL = "hierarchical"
