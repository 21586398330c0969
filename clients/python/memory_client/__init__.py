"""Typed Python client of the memory governance service's agent API, sync (`MemoryClient`) and async
(`AsyncMemoryClient`): the response shapes are TypedDicts generated from the service's OpenAPI
schema (`memory_client.models`), errors are `ApiError`s carrying the API's error shape."""

from memory_client import models
from memory_client._async import OPERATIONS, AsyncMemoryClient
from memory_client._core import UNCHECKED, RetryPolicy, StreamEvent
from memory_client._sync import MemoryClient
from memory_client.errors import (
    ApiError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
)

__all__ = [
    "OPERATIONS",
    "UNCHECKED",
    "ApiError",
    "AsyncMemoryClient",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "MemoryClient",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RetryPolicy",
    "ServerError",
    "StreamEvent",
    "models",
]
