"""The Workflows page in a real browser: an admin writes a document, sees each problem at
its path under it (accessibly), fixes it and finds the workflow listed."""

from __future__ import annotations

import json

import pytest

from agents.models import WorkflowDefinition
from tests.browser.conftest import assert_accessible

pytestmark = pytest.mark.django_db(transaction=True)

GOOD = {
    "input": {"type": "object", "properties": {"expression": {"type": "string"}}},
    "steps": [
        {"id": "sum", "tool": "calculator", "arguments": {"expression": "input.expression"}},
        {"id": "answer", "transform": "{result: sum, asked: input.expression}"},
    ],
}


def test_an_admin_sees_problems_at_their_paths_then_saves(trio, axe_tab):
    tab, page = axe_tab, axe_tab.page
    tab.login("alice")
    tab.goto("/t/acme/workflows/")
    page.get_by_role("link", name="New workflow").first.click()
    page.wait_for_url(f"{tab.base}/t/acme/workflows/new/")
    page.get_by_label("Name", exact=True).fill("Sum up")
    page.get_by_label("Slug").fill("sum-up")
    bad = {**GOOD, "steps": [{**GOOD["steps"][0], "tool": "teleport"}, GOOD["steps"][1]]}
    document = page.get_by_role("textbox", name="Document (JSON)")
    document.fill(json.dumps(bad))
    page.get_by_role("button", name="Create workflow").click()

    errors = page.locator(".has-error .errorlist")
    errors.wait_for()
    assert "steps[0].tool: no tool named 'teleport'" in errors.inner_text()
    assert not WorkflowDefinition.objects.exists()
    assert_accessible(tab, "workflow form with problems")

    page.get_by_role("textbox", name="Document (JSON)").fill(json.dumps(GOOD))
    page.get_by_role("button", name="Create workflow").click()
    page.wait_for_url(f"{tab.base}/t/acme/workflows/")
    assert page.get_by_role("row").filter(has_text="Sum up").is_visible()
    assert WorkflowDefinition.objects.get(tenant=trio.acme, slug="sum-up").definition == GOOD
    tab.assert_clean()
