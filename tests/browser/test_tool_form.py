"""The tool page's form instead of JSON in a real browser: rows added and filled, the URL's
placeholder checked as typed, a field picked from a sample answer, the JSON kept in step
both ways (htmx under the strict CSP), saved and shown again."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import assert_accessible
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db(transaction=True)

SAMPLE = {"data": {"name": "Rex", "owners": [{"name": "Ann"}]}, "meta": {"page": 1}}


def test_an_admin_makes_an_http_tool_with_the_form(trio, axe_tab):
    tab = axe_tab
    tab.login("alice")
    tab.goto("/t/acme/tools/new/")
    page = tab.page
    field = lambda name: page.locator(f'[name="{name}"]')  # noqa: E731
    page.get_by_label("Name", exact=True).first.fill("pet")
    page.locator("#id_description").fill("One pet by its id.")

    # The example's argument becomes pet_id; the blank row and one added become two more.
    field("arg-0-name").fill("pet_id")
    field("arg-0-type").select_option("integer")
    field("arg-0-to").select_option("path")
    field("arg-0-destination").fill("")  # the example's "q"
    field("arg-1-name").fill("status")
    field("arg-1-enum").fill("available, sold")
    page.get_by_role("button", name="Add argument").click()
    field("arg-2-name").fill("limit")
    field("arg-2-type").select_option("integer")
    field("arg-2-description").fill("At most this many.")

    field("req-method").select_option("POST")
    field("req-url").fill("https://api.example.com/pets/{pet_id}/{owner}")
    problems = page.locator("#rows-problems")
    expect(problems).to_contain_text("{owner} has no argument: add one that goes to the path.")
    field("req-url").fill("https://api.example.com/pets/{pet_id}")
    expect(problems).to_be_empty()

    # Rows -> JSON: the disclosure shows what the rows write.
    page.get_by_text("Edit as JSON", exact=True).click()
    config = page.get_by_role("textbox", name="HTTP request")
    expect(config).to_have_value(json.dumps(_config_so_far(), indent=2))

    # JSON -> rows: a timeout typed into the JSON shows in its field.
    config.fill(json.dumps({**_config_so_far(), "timeout_s": 7}, indent=2))
    expect(field("req-timeout_s")).to_have_value("7")

    # A field picked from a sample answer becomes a row of the model's view.
    page.get_by_label("Pick fields from a sample answer").fill(json.dumps(SAMPLE))
    fields = page.locator("#sample-fields")
    expect(fields.locator("code")).to_have_text(["data.name", "data.owners.*.name", "meta.page"])
    fields.get_by_label("data.name").check()
    expect(field("view-0-field")).to_have_value("name")
    expect(field("view-0-path")).to_have_value("data.name")
    expect(config).to_contain_text('"model_view"')
    tab.screenshot("tool_form")
    assert_accessible(tab, "tool form")
    page.set_viewport_size({"width": 390, "height": 800})
    tab.screenshot("tool_form_narrow")
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"the tool form scrolls sideways: {widths}"
    page.set_viewport_size({"width": 1280, "height": 800})

    page.get_by_role("button", name="Create tool").click()
    expect(page.get_by_role("status").filter(has_text="Saved tool")).to_be_visible()
    tool = ToolDefinition.objects.get(tenant=trio.acme, name="pet")
    assert set(tool.input_schema["properties"]) == {"pet_id", "status", "limit"}
    assert tool.input_schema["properties"]["status"]["enum"] == ["available", "sold"]
    assert tool.config == {
        **_config_so_far(),
        "timeout_s": 7.0,
        "model_view": {"name": "data.name"},
    }

    page.reload()  # reopened: the rows show what was saved
    expect(field("arg-1-name")).to_have_value("status")
    expect(field("arg-2-description")).to_have_value("At most this many.")
    expect(field("req-method")).to_have_value("POST")
    expect(field("req-url")).to_have_value("https://api.example.com/pets/{pet_id}")
    expect(field("view-0-path")).to_have_value("data.name")
    tab.screenshot("tool_form_saved")
    tab.assert_clean()


def _config_so_far() -> dict:
    return {
        "method": "POST",
        "url": "https://api.example.com/pets/{pet_id}",
        "arguments": [
            {"argument": "pet_id", "to": "path"},
            {"argument": "status", "to": "query"},
            {"argument": "limit", "to": "query"},
        ],
    }
