"""Admin sign-ins are locked out after repeated failures, per username and per client address, with
an audit record of ids and counts (issue 23: 30 wrong passwords in 20 s, then the right one, got in).
Off in the other tests (tests/pgenv.py); on here, as in production."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from governance.models import AuditRecord
from memoryapp.agents.limits import limits_breaker_reset, limits_redis

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def lockout_on(settings: Any) -> Iterator[None]:
    settings.ADMIN_LOGIN_FAILURES, settings.ADMIN_LOGIN_ADDRESS_FAILURES = 3, 6
    settings.ADMIN_LOGIN_LOCKOUT_SECONDS = 900
    limits_breaker_reset()
    yield
    client = limits_redis()
    for name in client.scan_iter(match="limits:login:*"):
        client.delete(name)


def operator(name: str) -> Any:
    return get_user_model().objects.create_user(name, password=PASSWORD, is_staff=True)


def address() -> str:
    return f"203.0.113.{secrets.randbelow(250) + 1}-{secrets.token_hex(4)}"


def sign_in(username: str, password: str, *, remote: str) -> Any:
    client = Client(REMOTE_ADDR=remote)
    response = client.post("/admin/login/?next=/admin/", {"username": username, "password": password})
    return response


def signed_in(response: Any) -> bool:
    return response.status_code == 302 and response["Location"] == "/admin/"


def test_a_username_that_failed_too_often_is_locked_even_with_the_right_password_and_audited() -> None:
    user = operator("olga")
    here = address()
    for attempt in range(3):
        wrong = sign_in("olga", f"guess {attempt}", remote=here)
        assert not signed_in(wrong)
        # The failure that locks the username says so at once.
        assert ("Too many failed sign-ins" in wrong.content.decode()) == (attempt == 2)
    locked = sign_in("olga", PASSWORD, remote=here)
    assert not signed_in(locked)
    assert "Too many failed sign-ins" in locked.content.decode()
    # From anywhere: the username is locked, not just this address; others sign in from here.
    assert not signed_in(sign_in("OLGA", PASSWORD, remote=address()))
    operator("oscar")
    assert signed_in(sign_in("oscar", PASSWORD, remote=here))

    record = AuditRecord.objects.get(action="staff.login_locked")
    assert record.subject == str(user.pk) and record.outcome == "locked"
    assert record.details == {"scope": "username", "failures": 3, "locked_seconds": 900}
    written = json.dumps(record.details) + record.subject
    assert "guess" not in written and PASSWORD not in written and "olga" not in written


def test_an_address_that_failed_too_often_is_locked_for_every_username() -> None:
    operator("olga")
    here = address()
    for n in range(6):  # different usernames: no username reaches its own limit
        assert not signed_in(sign_in(f"nobody-{n}", "x", remote=here))
    refused = sign_in("olga", PASSWORD, remote=here)
    assert not signed_in(refused) and "Too many failed sign-ins" in refused.content.decode()
    assert signed_in(sign_in("olga", PASSWORD, remote=address()))
    record = AuditRecord.objects.get(action="staff.login_locked")
    assert record.details == {"scope": "address", "failures": 6, "locked_seconds": 900, "address": here}
    assert record.subject == ""


def test_the_lock_ends_with_its_window_and_a_success_clears_the_usernames_failures(settings: Any) -> None:
    settings.ADMIN_LOGIN_ADDRESS_FAILURES = 0  # the username's lock alone
    operator("olga")
    here = address()
    for _ in range(2):
        sign_in("olga", "wrong", remote=here)
    assert signed_in(sign_in("olga", PASSWORD, remote=here))  # 2 of 3, then right: cleared
    for _ in range(2):
        sign_in("olga", "wrong", remote=here)
    assert signed_in(sign_in("olga", PASSWORD, remote=here))
    for _ in range(3):
        sign_in("olga", "wrong", remote=here)
    assert not signed_in(sign_in("olga", PASSWORD, remote=here))
    # The window ends (its counter expires in Redis, as it does ADMIN_LOGIN_LOCKOUT_SECONDS after
    # the first failure): the right password signs in again.
    counter = limits_redis()
    (name,) = list(counter.scan_iter(match="limits:login:user:olga"))
    assert 0 < counter.ttl(name) <= 900
    counter.pexpire(name, 1)
    time.sleep(0.1)
    assert signed_in(sign_in("olga", PASSWORD, remote=here))
