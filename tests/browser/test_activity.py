"""Runs, approvals and usage in Chromium: the timeline renders (screenshot), the usage
charts draw under the CSP, deciding an approval swaps its card in place, and a failed run
is resumed from its page."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from agents.models import Approval
from agents.runs.direct_calls import tool_run
from tests.conftest import PAY_SECRET
from tests.factories import make_agent
from tests.web.test_activity import make_run, pending_approval, tool_run_events

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_run_timeline_shows_a_tool_call_and_an_approval(trio, tab):
    events = tool_run_events(result={"forecast": "sunny", "html": "<b>not bold</b>"})
    run = make_run(
        trio.acme,
        agent=make_agent(trio.acme),
        user=trio.bob,
        status="awaiting_approval",
        input="What's the weather? Then pay bob.",
        seconds=1.2,
        input_tokens=120,
        output_tokens=30,
        model="gpt-test",
        provider="openai",
        events=events,
    )
    pending_approval(run)
    child = make_run(
        trio.acme, agent=run.agent, user=trio.bob, parent=run, child_key="research", depth=1
    )
    tab.login("bob")
    tab.goto(f"/t/acme/runs/{run.pk}/")
    timeline = tab.page.get_by_role("list", name="Timeline")
    assert timeline.get_by_text("Model call").is_visible()
    assert timeline.get_by_role("heading", name="Tool call lookup").is_visible()
    assert timeline.get_by_text('"html": "<b>not bold</b>"').is_visible()  # text, not HTML
    assert timeline.get_by_role("heading", name="Approval required for transfer").is_visible()
    assert timeline.get_by_role("button", name="Approve").is_visible()
    assert tab.page.get_by_role("link", name=f"Run #{child.pk}").is_visible()
    tab.screenshot("run_timeline")
    tab.page.set_viewport_size({"width": 380, "height": 800})  # a phone
    width = tab.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 380, f"the page scrolls sideways on a narrow screen ({width}px)"
    tab.screenshot("run_timeline_narrow")
    tab.assert_clean()


def test_the_usage_page_draws_svg_charts_without_csp_errors(trio, tab):
    agents = [make_agent(trio.acme), make_agent(trio.acme, "writer")]
    now = timezone.now()
    for day in range(6):
        for index, agent in enumerate(agents):
            make_run(
                trio.acme,
                agent=agent,
                user=trio.alice,
                created=now - timedelta(days=day),
                seconds=1 + day + index,
                input_tokens=100 * (day + 1),
                output_tokens=40,
                events=[
                    ("tool.completed", {"name": "lookup", "error": "x" if day % 3 else None}),
                ],
            )
    tab.login("alice")
    response = tab.goto("/t/acme/usage/?days=7")
    assert "style-src 'self'" in response.headers["content-security-policy"]
    charts = tab.page.locator("svg.chart-svg")
    assert charts.count() == 4
    runs_chart = tab.page.get_by_role("img", name="Runs per day, the last 7 days")
    assert runs_chart.is_visible()
    box = runs_chart.bounding_box()
    assert box and box["width"] > 200 and box["height"] > 50
    assert runs_chart.locator("rect").count() == 12  # 6 days x 2 agents
    fill = tab.page.evaluate(
        "getComputedStyle(document.querySelector('svg.chart-svg rect.series-1')).fill"
    )
    assert fill == "rgb(220, 139, 0)"  # the stylesheet coloured it; no inline style needed
    tab.page.get_by_text("Data table: runs per day").click()
    assert tab.page.locator("#runs-chart-table tbody tr").count() == 7
    tab.screenshot("usage")
    tab.page.get_by_role("link", name="30 days").click()
    tab.page.wait_for_url("**/usage/?days=30")
    assert tab.page.get_by_role("img", name="Tokens per day, the last 30 days").is_visible()
    tab.assert_clean()


def test_deciding_an_approval_in_the_inbox_updates_it_in_place(trio, tab):
    agent = make_agent(trio.acme)
    run = make_run(trio.acme, agent=agent, user=trio.bob, status="awaiting_approval")
    first = pending_approval(run, call_id="c1", arguments={"amount": 5})
    second = pending_approval(run, call_id="c2", tool="refund", arguments={"amount": 7})
    tab.login("bob")
    tab.goto("/t/acme/approvals/")
    url = tab.page.url
    assert tab.page.locator("#pending-count").text_content() == "2"
    card = tab.page.locator(f"#approval-{first.pk}")
    card.get_by_label("Reason").fill("Too risky today")
    card.get_by_role("button", name="Reject").click()
    card = tab.page.locator(f"#approval-{first.pk}")
    card.get_by_text("Rejected by bob").wait_for()
    assert card.get_by_text("Too risky today").is_visible()
    assert card.get_by_role("button").count() == 0
    assert tab.page.url == url  # swapped in place, no navigation
    assert tab.page.locator("#pending-count").text_content() == "1"  # the heading follows
    other = tab.page.locator(f"#approval-{second.pk}")
    assert other.get_by_role("button", name="Approve").is_visible()  # untouched
    first.refresh_from_db()
    assert (first.status, first.decided_by_label) == ("rejected", "bob")
    other.get_by_role("button", name="Approve").focus()
    tab.screenshot("approvals")
    tab.assert_clean()


def _parked_payment(trio):
    try:
        return tool_run(
            tenant=trio.acme, name="pay", arguments={"amount": 5, "to": "bob"}, user=trio.bob
        )
    finally:
        connections.close_all()  # this thread's


def test_an_edit_of_a_prepared_request_shows_the_new_request_in_place(trio, tab, pay):
    with ThreadPoolExecutor(1) as thread:  # (Playwright's loop runs in this one)
        outcome = thread.submit(_parked_payment, trio).result()
    first = Approval.objects.get(run_id=outcome.run_id)
    tab.login("bob")
    tab.goto("/t/acme/approvals/")
    card = tab.page.locator(f"#approval-{first.pk}")
    assert "Authorization: Bearer ***" in card.text_content()
    card.get_by_text("Edit the arguments").click()
    card.get_by_label("Arguments").fill('{"amount": 6, "to": "bob"}')
    card.get_by_role("button", name="Approve").click()
    tab.page.locator(f"#approval-{first.pk}", has_text="Nothing was sent").wait_for()
    second = Approval.objects.get(run_id=outcome.run_id, status="pending")
    fresh = tab.page.locator(f"#approval-{second.pk}")
    fresh.wait_for()
    assert '{"amount":6}' in fresh.text_content() and PAY_SECRET not in tab.page.content()
    assert pay.requests == []
    tab.assert_clean()


def test_a_failed_run_is_resumed_from_its_page_and_its_timeline_says_by_whom(trio, tab):
    run = make_run(
        trio.acme,
        agent=make_agent(trio.acme),
        user=trio.bob,
        status="failed",
        error="ProviderUnavailable: OpenAI answered HTTP 500",
        input="Order a widget.",
        events=[
            ("run.started", {"model": "gpt-test"}),
            ("run.failed", {"status": "failed", "error": "ProviderUnavailable: HTTP 500"}),
        ],
    )
    tab.login("bob")
    tab.goto(f"/t/acme/runs/{run.pk}/")
    tab.page.get_by_role("button", name="Resume").click()
    timeline = tab.page.get_by_role("list", name="Timeline")
    resumed = timeline.get_by_role("heading", name="Resumed by bob")
    resumed.wait_for()  # the page again, after the redirect
    # (A worker may take the resumed run at once: it fails again here, with no connection.)
    assert timeline.get_by_role("heading", name="Run failed").first.is_visible()
    tab.assert_clean()
