"""Browser tests: Debian's Chromium driven by Playwright against a live uvicorn server (and,
where runs execute, the session's Celery worker) on the test database.

`playwright install` is never run (it downloads browsers); Playwright launches
/usr/bin/chromium, which .ci/run installs with apt. Without it these tests fail loudly.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.factories import PASSWORD

ARTIFACTS = Path(__file__).parent / "artifacts"  # screenshots to look at; git-ignored
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip


@pytest.fixture(scope="session")
def web_server(live_server_base):
    """The session's live server (tests/conftest.py), its base URL."""
    return live_server_base


@pytest.fixture(scope="module")  # not longer: Playwright's loop runs in this thread meanwhile
def browser():
    if shutil.which(CHROMIUM) is None:
        raise RuntimeError(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls
    # are still plain synchronous code. Only for these tests: elsewhere the check stays on.
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        monkeypatch.undo()


class Page:
    """A browser tab with the console watched: CSP violations and script errors fail the
    test that caused them (see `assert_clean`)."""

    def __init__(self, page, base: str) -> None:
        self.page, self.base = page, base
        self.problems: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("response", self._response)

    def _console(self, message) -> None:
        # HTTP errors are console errors too; pages a test visits on purpose may answer
        # 403/404, so only failed static files count (see _response).
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.problems.append(message.text)

    def _response(self, response) -> None:
        if "/static/" in response.url and response.status >= 400:
            self.problems.append(f"{response.status} {response.url}")

    def goto(self, path: str):
        return self.page.goto(self.base + path)

    def login(self, username: str, password: str = PASSWORD) -> None:
        self.goto("/login/")
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password").fill(password)
        self.page.get_by_role("button", name="Log in").click()
        self.page.wait_for_url(lambda url: "/login/" not in url)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=path, full_page=True)
        return path

    def assert_clean(self) -> None:
        assert self.problems == [], self.problems


@pytest.fixture
def tab(browser, web_server):
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield Page(page, web_server)
    context.close()
