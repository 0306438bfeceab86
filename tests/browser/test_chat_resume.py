"""A failed chat answer resumed in Chromium, against the live server and a real Celery
worker: the provider answers 500 past the connection's retries, the answer fails live and
its footer offers Resume; the provider is fixed, Resume is pressed, and the answer streams
into the same turn; the run's page shows the failure and who resumed it."""

from __future__ import annotations

import pytest

from agents.models import Run
from tests.browser.test_chat import start_chat
from tests.fakes.provider_server import ErrorReply, TextReply

pytestmark = pytest.mark.django_db(transaction=True)

DOWN = ErrorReply(500, "upstream is down", headers={"retry-after": "0.1"})


def test_a_failed_answer_is_resumed_from_the_chat(
    trio, agent, connection, provider_server, celery_worker_process, tab
):
    connection.max_retries = 1  # down past its retries: two 500s
    connection.save()
    provider_server.script("openai", DOWN, DOWN)
    tab.login("bob")
    run_id = start_chat(tab, "At what temperature does water boil?")
    page = tab.page
    footer = page.locator(f"#run-{run_id}-footer")
    resume = footer.get_by_role("button", name="Resume")
    resume.wait_for()  # the live stream's footer, once the answer failed
    assert "provider is unavailable" in footer.locator(".problem").text_content()
    tab.screenshot("resume-chat-failed")

    provider_server.script("openai", TextReply("Water boils at **100 °C** at sea level."))
    resume.click()
    answer = page.locator(f"#turn-{run_id} .segment", has_text="Water boils at")
    answer.wait_for()
    assert answer.locator("strong").text_content() == "100 °C"
    footer.get_by_role("button", name="Regenerate").wait_for()  # the answer ended
    assert footer.get_by_role("button", name="Resume").count() == 0
    assert footer.locator(".problem").count() == 0
    assert page.locator(".turn").count() == 1  # in the same place, not a new turn
    assert page.locator(f"#run-{run_id} .segment").count() == 1
    assert "upstream is down" not in page.locator(f"#run-{run_id}").text_content()
    assert Run.objects.get(pk=run_id).status == "succeeded"
    tab.screenshot("resume-chat-resumed")

    tab.goto(f"/t/acme/runs/{run_id}/")  # the run's timeline: the failure, who resumed it
    timeline = page.locator("body").text_content()
    assert timeline.index("Run failed") < timeline.index("Resumed by bob")
    assert timeline.index("Resumed by bob") < timeline.index("Run finished")
    tab.assert_clean()
