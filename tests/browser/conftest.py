"""Browser tests: Debian's Chromium driven by Playwright against a live uvicorn server (and,
where runs execute, the session's Celery worker) on the test database.

`playwright install` is never run (it downloads browsers); Playwright launches Debian's
Chromium headless shell (/usr/bin/chromium-headless-shell, `make chromium` installs it with
apt). It is the build Playwright itself runs headless tests in: the same Blink and V8 without
the browser's own windows, whose WebUI renderers took 60% of Chromium's CPU in these tests
(about 144 s of CPU against 57 s over tests/browser). Without it these tests fail loudly.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.factories import PASSWORD

ARTIFACTS = Path(__file__).parent / "artifacts"  # screenshots to look at; git-ignored
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium-headless-shell")
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
        missing = f"{CHROMIUM} is missing: make chromium (apt-get install chromium-headless-shell)"
        raise RuntimeError(missing)
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


# axe-core from tests/clients/node (`make node-clients`), added to each page as an init script
# (the DevTools protocol's, which the page's strict CSP does not govern): the CSP stays on and
# a violation still fails the test (`Page.assert_clean`).
AXE = Path(__file__).resolve().parents[2] / "tests/clients/node/node_modules/axe-core/axe.min.js"
# WCAG 2.x A and AA, and axe's best practices (landmarks, headings, one main).
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
DESKTOP = {"width": 1280, "height": 800}


@pytest.fixture
def axe_tab(browser, web_server):
    """A tab with axe-core on every page it opens, and the clipboard allowed."""
    if not AXE.exists():
        raise RuntimeError(f"{AXE} is missing: make node-clients (npm ci in tests/clients/node)")
    context = browser.new_context(viewport=DESKTOP)
    context.add_init_script(path=str(AXE))
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=web_server)
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield Page(page, web_server)
    context.close()


def assert_accessible(tab: Page, what: str) -> None:
    """axe-core (an `axe_tab`) finds no serious or critical violation in the page as it is."""
    found = tab.page.evaluate(
        """async (tags) => {
            const result = await axe.run(document, {runOnly: {type: "tag", values: tags}});
            return result.violations
              .filter((v) => v.impact === "serious" || v.impact === "critical")
              .map((v) => `${v.id} (${v.impact}): ${v.help} at ` +
                          v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", "));
        }""",
        AXE_TAGS,
    )
    assert found == [], f"{what}: {found}"
