"""The demo tenant works out of the box: offline model + the seeded assistant."""

from __future__ import annotations

from agents.runs import run_inline
from agents.seed import seed_demo_agent
from providers.services import seed_demo_connection


def test_the_seeded_assistant_answers_with_the_offline_model(trio, settings):
    settings.PLATFORM_PROVIDER_KEYS = {}
    seed_demo_connection(trio.acme)
    assistant = seed_demo_agent(trio.acme)
    run = run_inline(
        tenant=trio.acme, agent=assistant, input="calculator: 2+2", initiated_by=trio.alice
    )
    assert run.status == "succeeded", run.error
    assert run.output.startswith("4") and "offline demo" in run.output
    notice = run_inline(tenant=trio.acme, agent=assistant, input="Hello!", initiated_by=trio.alice)
    assert notice.status == "succeeded" and "offline demo" in notice.output
    assert run.provider == "offline"
