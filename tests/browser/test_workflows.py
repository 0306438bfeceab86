"""The Workflows page in a real browser: an admin writes a document, sees each problem at
its path under it (accessibly), fixes it and finds the workflow listed; a workflow declared
there, started over REST, runs on the session's Celery worker and its steps show in the
run's timeline."""

from __future__ import annotations

import json
import re
import time

import pytest

from agents.models import Run, WorkflowDefinition
from tests.api.test_resources import key_for
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


def test_a_declared_workflow_started_over_rest_shows_its_steps_in_the_timeline(
    trio, celery_worker_process, tab
):
    page = tab.page
    tab.login("alice")
    tab.goto("/t/acme/workflows/new/")
    page.get_by_label("Name", exact=True).fill("Sum up")
    page.get_by_label("Slug").fill("sum-up")
    page.get_by_role("textbox", name="Document (JSON)").fill(json.dumps(GOOD))
    page.get_by_role("button", name="Create workflow").click()
    page.wait_for_url(f"{tab.base}/t/acme/workflows/")

    started = page.request.post(
        f"{tab.base}/api/v1/runs",
        data={"workflow": "sum-up", "arguments": {"expression": "6 * 7"}},
        headers={"Authorization": f"Bearer {key_for(trio.acme, 'read', 'run')}"},
    )
    assert started.status == 201, started.text()
    run_id = started.json()["id"]
    deadline = time.monotonic() + 30  # the worker takes it and runs its steps
    while Run.objects.get(pk=run_id).status not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, "the workflow run did not finish"
        time.sleep(0.1)
    run = Run.objects.get(pk=run_id)
    assert run.status == "succeeded", run.error
    assert run.structured_output == {"result": {"result": 42}, "asked": "6 * 7"}

    tab.goto(f"/t/acme/runs/{run_id}/")
    timeline = page.get_by_role("list", name="Timeline")
    for step in ("input", "sum", "answer", "output"):
        assert timeline.get_by_role("heading", name=re.compile(f"^Step {step} ")).is_visible()
    calculated = timeline.get_by_role("heading", name=re.compile("^Tool call calculator"))
    assert calculated.is_visible()  # the tool step's call, under its step
    assert timeline.get_by_role("heading", name=re.compile("^Run finished")).is_visible()
    tab.screenshot("workflow_run_timeline")
    tab.assert_clean()
