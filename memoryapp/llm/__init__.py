"""The language-model port and its providers (see port.py)."""

from memoryapp.llm.model import (
    Completion,
    LanguageModel,
    Message,
    ModelError,
    ModelTransientError,
    ModelUnavailable,
    Usage,
)
from memoryapp.llm.port import complete, current_model, model_available, recording_usage, use_model

__all__ = [
    "Completion",
    "LanguageModel",
    "Message",
    "ModelError",
    "ModelTransientError",
    "ModelUnavailable",
    "Usage",
    "complete",
    "current_model",
    "model_available",
    "recording_usage",
    "use_model",
]
