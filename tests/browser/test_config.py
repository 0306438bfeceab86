"""Configuration pages in a real browser: the agent form's live tool list, "Try it", the
tool test panel (htmx under the strict CSP), and members kept out."""

from __future__ import annotations

import re

import pytest
import yaml
from playwright.sync_api import expect

from agents.models import Agent
from tenancy.models import ApiKey
from tests.factories import make_agent
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_creates_an_agent_with_a_tool_and_chats_with_it(
    trio, tab, connection, provider_server, celery_worker_process
):
    tab.login("alice")
    tab.goto("/t/acme/agents/new/")
    page = tab.page
    effective = page.locator("#effective-tools")
    page.get_by_label("Name", exact=True).fill("Math helper")
    page.get_by_label("Slug").fill("math")
    page.get_by_label("Instructions").fill("Use the calculator for arithmetic.")
    assert effective.get_by_text("current_time").is_visible()  # all tools, at first

    page.get_by_label("Use all tools").uncheck()
    expect(effective).to_contain_text("No tools")
    tools_by_name = page.get_by_role("group", name="Tools by name")
    tools_by_name.get_by_label("calculator").check()
    expect(effective.locator(".count")).to_have_text("(1)")
    assert effective.locator("code").all_inner_texts() == ["calculator"]
    tab.screenshot("agent_form")
    page.set_viewport_size({"width": 390, "height": 800})
    tab.screenshot("agent_form_narrow")
    page.set_viewport_size({"width": 1280, "height": 800})

    page.get_by_role("button", name="Create agent").click()
    page.wait_for_url(f"{tab.base}/t/acme/agents/math/edit/")
    assert page.get_by_role("status").filter(has_text="Saved agent").is_visible()
    agent = Agent.objects.get(tenant=trio.acme, slug="math")
    assert agent.tool_names == ["calculator"] and not agent.use_all_tools

    page.get_by_role("link", name="Try it in the chat").click()
    page.wait_for_url(re.compile(r"/t/acme/chat/\?agent=math$"))
    expect(page.get_by_label("Chat with")).to_have_value("agent:math")  # preselected

    # ...and chats with it: the model calls the agent's tool, then answers.
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')]),
        TextReply("It is **42**."),
    )
    message = page.get_by_label("Message")
    message.fill("What is 6*7?")
    message.press("Enter")
    page.locator(".tool-card.done", has_text="calculator").wait_for(timeout=15_000)
    page.locator(".answer strong, .segment strong", has_text="42").wait_for(timeout=15_000)
    offered = provider_server.requests_to("/v1/chat/completions")[0].body["tools"]
    assert [t["function"]["name"] for t in offered] == ["calculator"]
    tab.assert_clean()


def test_the_tool_test_panel_shows_the_result_in_place(trio, tab):
    tab.login("alice")
    tab.goto("/t/acme/tools/")
    row = tab.page.get_by_role("row").filter(has_text="calculator")
    row.get_by_role("link", name="Test").click()
    tab.page.wait_for_url(f"{tab.base}/t/acme/tools/try/calculator/")
    arguments = tab.page.get_by_role("textbox", name="Arguments (JSON)")
    arguments.fill('{"expression": "6 * 7"}')
    tab.page.get_by_role("button", name="Run the tool").click()
    result = tab.page.locator("#try-result")
    result.locator("pre").wait_for()
    assert "42" in result.inner_text()
    assert tab.page.url.endswith("/t/acme/tools/try/calculator/")  # swapped in, no reload
    arguments.fill("{nope")
    tab.page.get_by_role("button", name="Run the tool").click()
    result.get_by_text("Not valid JSON").wait_for()
    tab.assert_clean()


def test_a_member_sees_no_configuration_and_gets_403(trio, tab):
    tab.login("bob")
    tab.page.wait_for_url(f"{tab.base}/t/acme/")
    nav = tab.page.get_by_role("navigation", name="Workspace")
    for name in ("Agents", "Crews", "Tools", "Connections", "API keys", "Members"):
        assert nav.get_by_role("link", name=name).count() == 0, name
    for path in (
        "agents/", "agents/new/", "crews/", "crews/new/", "tools/", "tools/new/",
        "tools/try/calculator/", "connections/", "connections/new/", "api-keys/", "members/",
    ):  # fmt: skip
        assert tab.goto(f"/t/acme/{path}").status == 403, path
    tab.assert_clean()


def test_an_admin_creates_a_key_that_may_act_for_members_and_sees_it_listed(trio, tab, tmp_path):
    tab.login("alice")
    tab.goto("/t/acme/api-keys/")
    page = tab.page
    page.get_by_label("Name").fill("Member portal")
    page.get_by_label("Run agents and tools").check()
    acts = page.get_by_role("checkbox", name="May act for members")
    expect(acts).not_to_be_checked()
    acts.check()
    page.screenshot(path=tmp_path / "api_key_form.png", full_page=True)
    page.get_by_role("button", name="Create API key").click()

    created = page.get_by_role("status").filter(has_text="created")
    expect(created).to_contain_text("API key “Member portal” created")
    key = ApiKey.objects.get(tenant=trio.acme, name="Member portal")
    assert key.acts_for_members and key.scopes == ["read", "run"]
    assert page.get_by_label("The new API key").input_value().startswith(f"ap_{key.prefix}_")
    row = page.get_by_role("row").filter(has_text="Member portal")
    expect(row).to_contain_text("may act for members")
    page.screenshot(path=tmp_path / "api_key_created.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 800})
    page.screenshot(path=tmp_path / "api_key_created_narrow.png", full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})

    tab.goto("/t/acme/api-keys/")  # listed as such afterwards too, the key never again
    expect(page.get_by_role("row").filter(has_text="Member portal")).to_contain_text(
        "may act for members"
    )
    assert page.get_by_label("The new API key").count() == 0
    tab.assert_clean()


def test_the_document_page_downloads_previews_the_diff_applies_and_shows_problems(
    trio, tab, tmp_path
):
    """Download the YAML, upload it changed, read the diff, apply it and see the change; an
    invalid document shows each problem's path and reason, and changes nothing."""
    make_agent(trio.acme, "support", instructions="Be kind.")
    tab.login("alice")
    tab.goto("/t/acme/document/")
    page = tab.page
    with page.expect_download() as caught:
        page.get_by_role("link", name="Download YAML").click()
    downloaded = tmp_path / "acme.yaml"
    caught.value.save_as(downloaded)
    document = yaml.safe_load(downloaded.read_text())
    [agent] = document["agents"]
    assert agent["slug"] == "support" and agent["instructions"] == "Be kind."

    agent["instructions"] = "Be kind and brief."
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(document, sort_keys=False))
    page.get_by_label("Upload a document").set_input_files(str(changed))
    page.get_by_role("button", name="Preview changes").click()
    plan = page.locator("section.plan")
    expect(plan.get_by_role("heading")).to_have_text("Changes it would make")
    row = plan.get_by_role("row").filter(has_text="support")
    expect(row).to_contain_text("update")
    expect(row).to_contain_text("instructions")
    expect(row).to_contain_text("Be kind and brief.")
    assert Agent.objects.get(tenant=trio.acme).instructions == "Be kind."  # a preview only
    tab.screenshot("document_preview")

    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_role("status").filter(has_text="Applied 1 change(s).")).to_be_visible()
    assert Agent.objects.get(tenant=trio.acme).instructions == "Be kind and brief."
    tab.goto("/t/acme/agents/support/edit/")
    expect(page.get_by_label("Instructions")).to_have_value("Be kind and brief.")

    tab.goto("/t/acme/document/")
    agent["tools"] = {"all": False, "names": ["nope"], "tags": [], "exclude": []}
    agent["colour"] = "blue"
    page.get_by_label("Or paste it").fill(yaml.safe_dump(document, sort_keys=False))
    page.get_by_role("button", name="Preview changes").click()
    expect(plan.get_by_role("heading")).to_have_text("The document cannot be applied")
    problems = plan.get_by_role("row").filter(has_text="agents[0]")
    expect(problems.filter(has_text="agents[0].colour")).to_contain_text("unknown field")
    tab.screenshot("document_problems")
    agent.pop("colour")
    page.get_by_label("Or paste it").fill(yaml.safe_dump(document, sort_keys=False))
    page.get_by_role("button", name="Apply").click()
    expect(plan.get_by_role("heading")).to_have_text("The document cannot be applied")
    expect(plan.get_by_role("row").filter(has_text="agents[0].tools.names[0]")).to_contain_text(
        "unknown tool 'nope'"
    )
    assert Agent.objects.get(tenant=trio.acme).tool_names == []
    tab.assert_clean()
