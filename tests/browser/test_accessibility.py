"""The home, the chat, the configuration pages and two of activity in Chromium: checked by
axe-core (no serious or critical violation), usable at phone width (390 px: no horizontal
scrolling, the navigation folded behind its Menu button) and by keyboard, and screenshotted.

axe-core is on every page of the `axe_tab` fixture (tests/browser/conftest.py).

Screenshots go to tests/browser/artifacts/ (git-ignored), or with UPDATE_SCREENSHOTS=1 to
docs/screenshots/, which docs/web.md shows.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.models import Feedback, Run
from agents.services import conversation_save
from tests.browser.conftest import ARTIFACTS, DESKTOP, Page, assert_accessible
from tests.factories import make_agent, make_crew
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs/screenshots"
PHONE = {"width": 390, "height": 844}

CODE_ANSWER = "Here it is:\n\n```python\nprint('hello')\n```\n\nRun it with Python 3."


@pytest.fixture
def tab(axe_tab):
    return axe_tab


def assert_fits(tab: Page, what: str) -> None:
    """Nothing scrolls sideways at the viewport's width."""
    widths = tab.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{what} scrolls sideways: {widths}"


def screenshot(tab: Page, name: str) -> Path:
    folder = SCREENSHOTS if os.environ.get("UPDATE_SCREENSHOTS") == "1" else ARTIFACTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    tab.page.screenshot(path=path)
    return path


def at_phone_width(tab: Page, what: str, shot: str = "") -> None:
    """At 390 px: the page fits, the navigation is folded behind Menu and opens from it,
    axe finds nothing; then back to the desktop width."""
    page = tab.page
    page.set_viewport_size(PHONE)
    assert_fits(tab, what)
    menu = page.get_by_role("button", name="Menu")
    workspace = page.get_by_role("navigation", name="Workspace")
    assert menu.is_visible() and not workspace.is_visible()
    if shot:
        screenshot(tab, shot)
    menu.click()
    assert workspace.is_visible() and menu.get_attribute("aria-expanded") == "true"
    assert_accessible(tab, f"{what}, phone width, menu open")
    menu.click()
    page.set_viewport_size(DESKTOP)


def test_from_the_home_to_an_answer_in_one_click(
    trio, agent, provider_server, celery_worker_process, tab
):
    make_agent(trio.acme, "translator", description="Translates between English and French.")
    make_crew(trio.acme, "team", [agent], description="Researches, then writes it up.")
    conversation_save(
        tenant=trio.acme,
        changes={"agent": agent, "title": "Quarterly planning"},
        owner_user=trio.bob,
    )
    provider_server.script("openai", TextReply(CODE_ANSWER, chunk_delay_s=0.05))
    page = tab.page
    tab.login("bob")
    page.wait_for_url(f"{tab.base}/t/acme/")

    # The home: what bob may chat with, his conversations.
    page.get_by_role("heading", name="Start a chat").wait_for()
    assert page.get_by_role("link", name="Quarterly planning").is_visible()
    assert_accessible(tab, "home")
    screenshot(tab, "home")
    at_phone_width(tab, "home", shot="home-phone")

    # One click: a new chat with the assistant, the composer focused; Enter sends.
    page.get_by_role("link", name="Assistant Agent").click()
    page.wait_for_url("**/chat/?agent=assistant")
    assert page.evaluate("document.activeElement.id") == "new-message"
    assert_accessible(tab, "new chat")
    page.keyboard.type("Show me hello world in Python")
    page.keyboard.press("Enter")
    page.locator(".segment:not(.streaming) pre").wait_for(timeout=20_000)
    page.get_by_role("button", name="Regenerate").wait_for()  # the run's end, committed
    run = Run.objects.filter(conversation__owner_user=trio.bob).get()
    assert run.status == "succeeded"
    # A function, not an expression: Playwright re-evaluates an expression with eval(), which
    # the page's CSP refuses once the first check comes back false.
    page.wait_for_function("() => document.activeElement.id === 'composer-input'")  # type on

    # Copy on the code block.
    copy = page.locator(".copy-code")
    copy.get_by_text("Copy code").click()
    copy.get_by_text("Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == "print('hello')\n"

    # The answer's menu: closed until asked, then the thumbs (loaded on opening) and notes.
    menu = page.locator(f"#run-{run.pk}-menu")
    assert not page.get_by_role("button", name="Good answer").is_visible()
    menu.locator("summary").click()
    page.get_by_role("button", name="Good answer").click()
    menu.get_by_text("Thanks for the feedback.").wait_for()
    assert Feedback.objects.get(run=run).rating == "up"
    assert_accessible(tab, "a conversation with an answer, its menu open")
    page.keyboard.press("Escape")  # closes the menu, stops nothing
    assert not menu.get_by_role("button", name="Good answer").is_visible()
    screenshot(tab, "chat")
    at_phone_width(tab, "chat", shot="chat-phone")

    # The picker: a new chat with another agent, from the conversation.
    page.get_by_text("New chat with…").click()
    page.get_by_role("list", name="New chat with").get_by_role("link", name="Translator").click()
    page.wait_for_url("**/chat/?agent=translator")
    assert page.get_by_label("Chat with").input_value() == "agent:translator"
    assert page.evaluate("document.activeElement.id") == "new-message"
    tab.assert_clean()


def test_an_approval_an_error_and_escape_to_stop(
    trio, agent, transfer, provider_server, celery_worker_process, tab
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "transfer", '{"amount": 5, "to": "bob"}')]),
        TextReply("All right, I sent nothing."),
        ErrorReply(503, "overloaded"),
        TextReply("A long answer that takes its time. " * 20, chunk_delay_s=0.3),
    )
    page = tab.page
    tab.login("bob")
    tab.goto("/t/acme/chat/?agent=assistant")
    page.get_by_label("Message").fill("Send 5 to bob")
    page.get_by_label("Message").press("Enter")

    card = page.locator(".approval-card", has_text="transfer")
    card.get_by_role("button", name="Approve").wait_for(timeout=20_000)
    assert_accessible(tab, "an approval card")
    card.get_by_label("Reason").fill("Not today")
    card.get_by_role("button", name="Reject").click()
    page.locator(".segment:not(.streaming)", has_text="I sent nothing").wait_for(timeout=20_000)
    page.get_by_role("button", name="Regenerate").wait_for()  # its end: the next turn is sent

    page.get_by_label("Message").fill("Try again")
    page.get_by_label("Message").press("Enter")
    page.locator(".problem").wait_for(timeout=20_000)
    assert_accessible(tab, "an answer that failed")

    page.get_by_label("Message").fill("Tell me a long story")
    page.get_by_label("Message").press("Enter")
    page.locator(".segment.streaming").filter(has_text="A long answer").wait_for(timeout=20_000)
    page.get_by_label("Message").press("Escape")  # (no "Stopping…": it may be gone by then)
    latest = Run.objects.filter(conversation__owner_user=trio.bob).latest("pk")
    page.locator(f"#run-{latest.pk}-footer", has_text="stopped").wait_for(timeout=20_000)
    latest.refresh_from_db()
    assert latest.status == "cancelled"
    tab.assert_clean()


def test_configuration_and_activity_pages_by_keyboard_and_at_phone_width(trio, agent, tab):
    page = tab.page
    tab.login("alice")  # acme's owner
    page.wait_for_url(f"{tab.base}/t/acme/")

    # The Build menu by keyboard: Enter opens it, its links are there, Escape closes it.
    build = page.get_by_role("navigation", name="Workspace").locator("summary", has_text="Build")
    build.focus()
    page.keyboard.press("Enter")
    agents = page.get_by_role("list", name="Build").get_by_role("link", name="Agents")
    assert agents.is_visible()
    page.keyboard.press("Escape")
    assert not agents.is_visible()
    assert page.evaluate("document.activeElement.textContent").startswith("Build")
    build.click()
    agents.click()
    page.wait_for_url("**/t/acme/agents/")

    pages = {
        "agents": "/t/acme/agents/",
        "agent form": f"/t/acme/agents/{agent.slug}/edit/",
        "tools": "/t/acme/tools/",
        "connections": "/t/acme/connections/",
        "runs": "/t/acme/runs/",
        "usage": "/t/acme/usage/",
    }
    for what, path in pages.items():
        tab.goto(path)
        current = page.get_by_role("navigation", name="Workspace").locator("[aria-current=page]")
        assert current.count() == 1, what
        assert_accessible(tab, what)
        page.set_viewport_size(PHONE)
        assert_fits(tab, what)
        page.set_viewport_size(DESKTOP)
    tab.goto(f"/t/acme/agents/{agent.slug}/edit/")
    screenshot(tab, "config-agent")
    at_phone_width(tab, "agent form", shot="config-agent-phone")
    tab.assert_clean()
