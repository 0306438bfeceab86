"""Publishing only what passes, in a real browser: an admin edits a gated agent's
instructions; the page shows the draft being evaluated, then failed beside the live score;
an override without a reason is refused and the live agent kept; with one, it publishes."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from playwright.sync_api import expect

from agents.evaluations import case_save, dataset_save, evaluation_run_to_end
from agents.models import Agent, Evaluation
from agents.publishing import pending_draft
from agents.services import agent_save
from tenancy.models import AuditEntry
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)

DRAFTED = "Answer like a pirate."


def in_a_thread(work) -> None:
    """Run `work` (which runs an event loop of its own) to its end in another thread."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # re-raised below, in the test
            failed.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive() and not failed, failed


def test_a_failing_draft_is_shown_refused_and_published_only_by_override(
    trio, agent, provider_server, tab
):
    dataset = dataset_save(tenant=trio.acme, changes={"name": "capitals"})
    case_save(
        tenant=trio.acme,
        dataset=dataset,
        changes={"input": "capital of France?", "expect": {"contains": "Paris"}},
    )
    agent_save(tenant=trio.acme, agent=agent, changes={"required_evaluation": dataset})
    tab.login("alice")
    tab.goto("/t/acme/agents/assistant/edit/")
    page = tab.page
    page.get_by_label("Instructions").fill(DRAFTED)
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_url(f"{tab.base}/t/acme/agents/assistant/edit/")
    banner = page.get_by_role("status").filter(has_text="A draft awaits")
    expect(banner).to_contain_text("being evaluated")  # no worker here: it waits for us
    expect(page.get_by_role("status").filter(has_text="saved as a draft")).to_be_visible()
    assert Agent.objects.get(pk=agent.pk).instructions == "Be brief."
    page.screenshot(path="/tmp/publish-evaluating.png", full_page=True)

    # Its evaluation runs the draft here; the fake model misses the case: failed.
    draft = pending_draft(agent)
    provider_server.script("openai", TextReply("Lyon."))
    evaluation = Evaluation.objects.get(pk=draft.evaluation_id)
    in_a_thread(lambda: evaluation_run_to_end(evaluation))  # (Playwright's loop runs here)
    page.reload()
    expect(banner).to_contain_text("failed its evaluation")
    expect(banner.locator("ins")).to_have_text(DRAFTED)
    expect(banner.locator("del")).to_have_text("Be brief.")
    page.screenshot(path="/tmp/publish-failed.png", full_page=True)

    # An override needs a reason (blank: refused, the live agent kept)...
    reason = banner.get_by_label("Reason for publishing without passing")
    reason.fill("   ")
    banner.get_by_role("button", name="Override and publish").click()
    expect(page.get_by_role("status").filter(has_text="Say why")).to_be_visible()
    assert Agent.objects.get(pk=agent.pk).instructions == "Be brief."

    # ...and with one, an admin publishes it, recorded in the audit log.
    reason.fill("The case is outdated.")
    banner.get_by_role("button", name="Override and publish").click()
    expect(page.get_by_role("status").filter(has_text="The draft is published.")).to_be_visible()
    expect(banner).to_have_count(0)
    expect(page.get_by_label("Instructions")).to_have_value(DRAFTED)
    page.screenshot(path="/tmp/publish-published.png", full_page=True)
    assert Agent.objects.get(pk=agent.pk).instructions == DRAFTED
    entry = AuditEntry.objects.get(details__draft=draft.pk, details__status="published")
    assert entry.actor_label == "alice" and "The case is outdated." in entry.details["decision"]
    tab.assert_clean()
