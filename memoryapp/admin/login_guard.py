"""Admin sign-ins locked out after repeated failures (issue 23: the admin login took 30 wrong
passwords in 20 s, then the right one).

1. Failures are counted in Redis (as the API's limits, `memoryapp.agents.limits`) per username
   (case folded) and per client address, each over a window of ADMIN_LOGIN_LOCKOUT_SECONDS that
   starts at its first failure.
2. A username that failed ADMIN_LOGIN_FAILURES times, or an address that failed
   ADMIN_LOGIN_ADDRESS_FAILURES times, is locked until its window ends: `LockoutModelBackend`
   refuses it before the password is checked (the right password too), and the login page says
   for how long (`LockoutAuthenticationForm`).
3. The failure that locks a username or an address appends an audit record
   (`staff.login_locked`): the user's id when the username is a user's, the address, the count
   and the lock's length; never a password, nor a username that is no user's (it may be a
   password typed in the wrong field).
4. A sign-in that succeeds clears its username's failures.

Redis away: no lockout (fail open, with the limits' warning), as the API's limits.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest

from governance.audit.chain import audit_append
from memoryapp.agents.limits import PREFIX, failures_clear, failures_count, failures_wait

WHAT = "the admin sign-in lockout"


def _address(request: HttpRequest | None) -> str:
    return str(request.META.get("REMOTE_ADDR") or "") if request is not None else ""


def _user_counter(username: str) -> str:
    return f"{PREFIX}login:user:{username.casefold()}"


def _address_counter(address: str) -> str:
    return f"{PREFIX}login:addr:{address}"


def login_locked_for(*, username: str, address: str) -> float | None:
    """Seconds until the username and the address may sign in again, None when they may now."""
    waits = [
        failures_wait(names=[_user_counter(username)], limit=settings.ADMIN_LOGIN_FAILURES, what=WHAT)
        if username
        else None,
        failures_wait(names=[_address_counter(address)], limit=settings.ADMIN_LOGIN_ADDRESS_FAILURES, what=WHAT)
        if address
        else None,
    ]
    found = [w for w in waits if w is not None]
    return max(found) if found else None


def login_failure_record(*, username: str, address: str) -> None:
    """Count one failed sign-in; audit the one that locks the username or the address."""
    seconds = settings.ADMIN_LOGIN_LOCKOUT_SECONDS
    for scope, name, limit in (
        ("username", _user_counter(username) if username else "", settings.ADMIN_LOGIN_FAILURES),
        ("address", _address_counter(address) if address else "", settings.ADMIN_LOGIN_ADDRESS_FAILURES),
    ):
        if not name or limit <= 0:
            continue
        counts = failures_count(names=[name], window_seconds=seconds, what=WHAT)
        if counts is None or counts[0] != limit:
            continue
        subject = ""
        if scope == "username":
            user_id = get_user_model().objects.filter(username=username).values_list("pk", flat=True).first()
            subject = "" if user_id is None else str(user_id)
        details: dict[str, Any] = {"scope": scope, "failures": counts[0], "locked_seconds": seconds}
        if scope == "address":
            details["address"] = address
        audit_append(action="staff.login_locked", actor="anonymous", subject=subject, outcome="locked", details=details)


def login_failures_clear(*, username: str) -> None:
    failures_clear(names=[_user_counter(username)], what=WHAT)


class LockoutModelBackend(ModelBackend):
    """Django's own backend, with the lockout around it (see the module's steps)."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        name, address = username or "", _address(request)
        if request is not None and login_locked_for(username=name, address=address) is not None:
            # Stops every backend: Django's `authenticate` answers None and signals the failure.
            raise PermissionDenied("locked out")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if request is None:
            return user
        if user is None:
            login_failure_record(username=name, address=address)
        else:
            login_failures_clear(username=name)
        return user


class LockoutAuthenticationForm(AdminAuthenticationForm):
    """The admin's login form, saying when a sign-in is locked out and for how long."""

    def clean(self) -> dict[str, Any]:
        try:
            return super().clean()
        except ValidationError:
            username = str(self.cleaned_data.get("username") or "")
            wait = login_locked_for(username=username, address=_address(self.request))
            if wait is None:
                raise
            minutes = max(1, math.ceil(wait / 60))
            raise ValidationError(
                f"Too many failed sign-ins for this account or from this address: try again in {minutes} minute(s).",
                code="locked_out",
            ) from None
