"""Typed readers of environment variables.

Every setting of the service comes from the environment through these helpers, so a bad
value stops the process at start with `ImproperlyConfigured` naming the variable, instead of
failing later in a request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "", *, environ: Mapping[str, str] | None = None) -> str:
    return (environ if environ is not None else os.environ).get(name, default)


def env_bool(name: str, default: bool = False, *, environ: Mapping[str, str] | None = None) -> bool:
    raw = (environ if environ is not None else os.environ).get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false, yes/no, on/off), not {raw!r}")


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    raw = (environ if environ is not None else os.environ).get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, not {value}")
    return value


def env_float(
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> float:
    raw = (environ if environ is not None else os.environ).get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, not {value}")
    return value


def env_list(name: str, default: list[str], *, environ: Mapping[str, str] | None = None) -> list[str]:
    raw = (environ if environ is not None else os.environ).get(name)
    if raw is None:
        return default
    return [part.strip() for part in raw.split(",") if part.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...], *, environ: Mapping[str, str] | None = None) -> str:
    raw = (environ if environ is not None else os.environ).get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {raw!r}")
    return value


def env_named(name: str, value: str, choices: tuple[str, ...], *, when: str) -> str:
    """`value` (the variable's, or its default) as one of `choices` is spelled, matched without
    regard to case; any other is refused with the names that are allowed `when` (the setting that
    makes them the only ones)."""
    for choice in choices:
        if choice.lower() == value.strip().lower():
            return choice
    raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)} with {when}, not {value!r}")


def env_url(name: str, schemes: tuple[str, ...], *, environ: Mapping[str, str] | None = None) -> str:
    """A URL whose scheme is one of `schemes`, or "" when the variable is unset."""
    raw = (environ if environ is not None else os.environ).get(name, "").strip()
    if not raw:
        return ""
    scheme = raw.split("://", 1)[0].lower() if "://" in raw else ""
    if scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name} must be a URL starting with {' or '.join(s + '://' for s in schemes)}, not {raw!r}"
        )
    return raw
