"""The admin in a real headless Chromium (Debian's `chromium` package, driven by Playwright), set up once.

A browser test module reads:

    pytestmark = BROWSER_TEST                      # the `browser` mark; skipped where chromium is missing

    def test_a_reviewer_does_x_in_a_browser(django_db_setup, live_server, chromium):
        seed rows here                             # before the block: see below
        staff_user("rita", role="reviewer")
        with chromium() as browser:
            page = log_in(browser, live_server, "rita", then="/admin/memoryapp/memoryitem/review/", dark=False)
            expect(page.locator(...))...
            shoot(page, "review-queue")          # bench/out/screenshots/review-queue.png
        check the database here

`django_db_setup` first in the arguments: the test database then outlives the live server's
connection at teardown. Inside the `with` block Playwright's event loop runs in this thread: the
ORM would open a connection of its own there and leave it open, so a test seeds its rows before
the block and checks the database after it; writes needed while the page is open go through
`in_another_thread`. The `chromium` fixture lets the ORM run beside that loop
(DJANGO_ALLOW_ASYNC_UNSAFE: the ORM calls stay synchronous).

Pages are 1,280 x 800 (`VIEWPORT`), light or dark (`dark=True`: `prefers-color-scheme: dark`).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from playwright.sync_api import Browser, Page, sync_playwright

from tests.kit import PROJECT_ROOT
from tests.kit.review_staff import ROLE_GROUPS

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = PROJECT_ROOT / "bench" / "out" / "screenshots"
PASSWORD = "read-the-memory-in-a-browser-2026"
VIEWPORT = {"width": 1280, "height": 800}

BROWSER_TEST = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not shutil.which("chromium"),
        reason=f"{CHROMIUM} is not installed (apt-get install chromium)",
    ),
]

# Headless, and quiet: no update checks, sync or other traffic beyond the live server on loopback.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# What reaches beyond the window: the page itself, or a box of the content wider than its own width
# (Django wraps a list's table in a box that scrolls sideways: columns out of sight count as too wide).
WIDEST = """() => {
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
  const found = [];
  const page = document.documentElement.scrollWidth - window.innerWidth;
  if (page > 0) found.push(['page', page]);
  for (const el of document.querySelectorAll('#content *')) {
    const over = el.scrollWidth - el.clientWidth;
    const style = getComputedStyle(el);
    if (over > 1 && el.clientWidth > 0 && ['auto', 'scroll'].includes(style.overflowX)) {
      const columns = [...el.querySelectorAll('thead th')].map((th) => `${th.innerText.trim()}:${Math.round(th.offsetWidth)}`);
      found.push([name(el), over, columns.join(' ')]);
    }
  }
  return found;
}"""


@contextlib.contextmanager
def chromium_opened() -> Iterator[Browser]:
    """Debian's Chromium, headless, closed at the end of the block."""
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"), args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def chromium(
    live_server: Any, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], contextlib.AbstractContextManager[Browser]]:
    """Opens Chromium as a context manager, beside the live server (see the module's docstring)."""
    # Playwright's sync API runs an event loop in this thread; the ORM calls of the tests are synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return chromium_opened


def staff_user(name: str, *, role: str | None = None, groups: tuple[str, ...] = (), superuser: bool = False) -> User:
    """A staff user who logs in with `PASSWORD`: in one role's group (`reviewer`, `privacy`,
    `operator`: tests.kit.review_staff.ROLE_GROUPS), in named groups, or a superuser."""
    if superuser:
        return User.objects.create_superuser(name, f"{name}@example.com", PASSWORD)
    user = User.objects.create_user(name, password=PASSWORD, is_staff=True)
    names = (*groups, ROLE_GROUPS[role]) if role else groups
    found = list(Group.objects.filter(name__in=names))
    assert {g.name for g in found} == set(names), f"no such role group among {names}"
    user.groups.set(found)
    return user


def log_in(
    browser: Browser,
    live_server: Any,
    name: str,
    *,
    then: str = "/admin/",
    dark: bool = False,
    wait_for: str = "#content",
    **page_options: Any,
) -> Page:
    """A new 1,280 px page (light, or dark), logged in as `name` through the admin's login form,
    on `then` once `wait_for` is there. `page_options` go to `browser.new_page` (accept_downloads=True)."""
    page = browser.new_page(viewport=VIEWPORT, color_scheme="dark" if dark else "light", **page_options)
    page.goto(f"{live_server.url}/admin/login/?next={then}")
    page.fill("#id_username", name)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_load_state()
    page.wait_for_selector(wait_for)
    return page


def shoot(page: Page, name: str, *, full_page: bool = False) -> Path:
    """The page photographed into bench/out/screenshots/<name>.png; a blank page would weigh less than 10 KB."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 10_000, (name, path.stat().st_size)
    return path


def too_wide(page: Page) -> list[Any]:
    """What reaches beyond the window on this page (`WIDEST`): empty when the page fits."""
    found: list[Any] = page.evaluate(WIDEST)
    return found


def has_class(name: str) -> re.Pattern[str]:
    """For `expect(locator).to_have_class(...)`: the element's classes include `name`."""
    return re.compile(rf"(^|\s){re.escape(name)}(\s|$)")


def in_another_thread(work: Callable[[], None]) -> None:
    """ORM writes while Playwright's loop runs in this thread: from a thread with its own connection."""

    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()


def page_queries(username: str, url: str) -> int:
    """The queries of one load of `url` by `username` (after a first load: the session, content
    types), for a page that must ask as many at size as with a few rows."""
    client = Client()
    client.force_login(User.objects.get(username=username))
    client.get(url)
    with CaptureQueriesContext(connection) as asked:
        answer = client.get(url)
    assert answer.status_code == 200, (url, answer.status_code)
    return len(asked)
