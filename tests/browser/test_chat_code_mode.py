"""Code mode in Chromium: an admin turns it on on the agent's page; a member's chat shows the
program the model wrote as code, its tool calls inside it, and its output (the session's
Celery worker runs the program in Monty; the model is the local fake provider)."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from agents.models import Agent
from tests.browser.conftest import Page
from tests.browser.test_chat import start_chat
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

CODE = (
    "total = 0\n"
    "for n in [6, 7]:\n"
    "    total += calculator(expression=f'{n} * 10')['result']\n"
    "print('total', total)"
)


def test_an_admin_turns_code_mode_on_and_the_chat_shows_the_program_and_its_calls(
    trio, agent, browser, web_server, tab, provider_server, celery_worker_process
):
    tab.login("alice")
    tab.goto(f"/t/acme/agents/{agent.slug}/edit/")
    code_mode = tab.page.get_by_label("Code mode")
    expect(code_mode).not_to_be_checked()
    expect(tab.page.locator("#id_code_mode_helptext")).to_contain_text("50 tool calls")
    code_mode.check()
    tab.page.get_by_role("button", name="Save changes").click()
    expect(tab.page.get_by_role("status").filter(has_text="Saved agent")).to_be_visible()
    assert Agent.objects.get(pk=agent.pk).code_mode

    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "run_code", json.dumps({"code": CODE}))]),
        TextReply("The total is **130**."),
    )
    context = browser.new_context(viewport={"width": 1280, "height": 1100})
    try:
        bob = Page(context.new_page(), web_server)
        bob.page.set_default_timeout(15_000)
        bob.login("bob")
        start_chat(bob, "Add 60 and 70 with the calculator")
        page = bob.page
        program = page.locator(".program-card.done")
        expect(program.locator("> summary")).to_contain_text("2 tool calls")
        page.locator(".answer strong, .segment strong", has_text="130").wait_for()
        program.locator("> summary").click()

        assert program.locator("pre.code").inner_text() == CODE  # as written, not JSON
        calls = program.locator(".program-calls > .tool-card")
        expect(calls).to_have_count(2)
        expect(calls.locator(".tool-name")).to_have_text(["calculator", "calculator"])
        calls.first.locator("> summary").click()
        expect(calls.first.locator("pre").first).to_contain_text('"expression": "6 * 10"')
        expect(calls.first.locator("pre").nth(1)).to_contain_text("60")
        expect(program.locator("> .tool-body > pre.json")).to_have_text("total 130")
        offered = provider_server.requests_to("/v1/chat/completions")[0].body["tools"]
        assert [t["function"]["name"] for t in offered] == ["run_code"]
        calls.first.locator("> summary").click()  # (closed again: the card fits the shot)
        bob.screenshot("codemode_chat")
        bob.assert_clean()
    finally:
        context.close()
    tab.assert_clean()
