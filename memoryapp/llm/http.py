"""The HTTP call both providers make: JSON in, JSON out, bounded retries on transient errors only.

1. POST the body with the call's timeout.
2. 2xx: return the JSON answer.
3. 429, 5xx, a connection error or a timeout: wait (the server's Retry-After when it gives one,
   else exponential backoff with jitter, both capped) and try again, at most LLM_MAX_RETRIES times.
4. Any other 4xx: the request itself is wrong; raise at once, asking again would not help.
"""

from __future__ import annotations

import random
import time
from typing import Any

import requests

from memoryapp.llm.model import ModelError, ModelTransientError

BACKOFF_BASE_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 8.0
RETRY_AFTER_MAX_SECONDS = 30.0


def _wait_seconds(attempt: int, response: requests.Response | None) -> float:
    if response is not None:
        header = response.headers.get("retry-after", "")
        try:
            return max(0.0, min(float(header), RETRY_AFTER_MAX_SECONDS))
        except ValueError:
            pass
    delay = min(BACKOFF_BASE_SECONDS * (2**attempt), BACKOFF_MAX_SECONDS)
    return delay * (0.5 + random.random() / 2)


def post_json(
    *,
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    timeout: float,
    max_retries: int,
) -> dict[str, Any]:
    last: Exception | None = None
    for attempt in range(max_retries + 1):
        response: requests.Response | None = None
        try:
            response = requests.post(url, json=body, headers=headers, timeout=timeout)
        except (requests.ConnectionError, requests.Timeout) as exc:
            last = ModelTransientError(f"{type(exc).__name__} calling the model at {url}")
        else:
            if 200 <= response.status_code < 300:
                try:
                    answer = response.json()
                except ValueError as exc:
                    raise ModelError(
                        f"The model answered {response.status_code} with a body that is not JSON."
                    ) from exc
                if not isinstance(answer, dict):
                    raise ModelError("The model answered JSON that is not an object.")
                return answer
            detail = response.text[:300]
            if response.status_code == 429 or response.status_code >= 500:
                last = ModelTransientError(f"The model answered {response.status_code}: {detail}")
            else:
                raise ModelError(f"The model refused the request ({response.status_code}): {detail}")
        if attempt < max_retries:
            time.sleep(_wait_seconds(attempt, response))
    assert last is not None
    raise last
