"""The chat's Resume (agentplatform/web/chat/views.resume): a failed answer offers it to who
may resume its run (the policy's `resume_run`: its starter, still allowed to use the agent,
with the member role); pressing it queues the run and answers the turn again, whose stream
picks up after `run.resumed`; the answer then lands in the same place. The live stream's
footer offers it too when the answer fails while watched. (In Chromium:
tests/browser/test_chat_resume.py.)"""

from __future__ import annotations

import asyncio
import re

import pytest
from django.test import Client

from agents.models import Run, RunEvent
from agents.runs import run_start
from agents.runs.engine import execute_run
from agents.services import conversation_save
from tenancy.models import AuditEntry, Membership
from tests.factories import login, make_agent, make_crew
from tests.fakes.provider_server import ErrorReply, TextReply

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def failed_turn(trio, agent, provider_server):
    """bob's chat, whose answer failed: the provider answered 500 (no retries left)."""
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob)
    provider_server.script("openai", ErrorReply(500, "upstream is down"))
    run = run_start(tenant=trio.acme, agent=agent, input="hi", conversation=chat,
                    initiated_by=trio.bob, enqueue=False)  # fmt: skip
    assert execute_run(run.pk) == "failed"
    return chat, run


def resume_form(chat, run) -> str:
    return f'hx-post="/t/acme/chat/{chat.pk}/runs/{run.pk}/resume/"'


def test_a_failed_answer_offers_resume_and_resuming_answers_in_its_place(
    trio, agent, provider_server
):
    chat, run = failed_turn(trio, agent, provider_server)
    bob = login(Client(), trio.bob)
    page = bob.get(f"/t/acme/chat/{chat.pk}/").content.decode()
    assert resume_form(chat, run) in page and f'hx-target="#run-{run.pk}"' in page

    provider_server.script("openai", TextReply("Back again."))  # the cause is fixed
    pressed = bob.post(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/resume/", **HTMX)
    assert pressed.status_code == 200
    fragment = pressed.content.decode()
    resumed_seq = RunEvent.objects.get(run=run, type="run.resumed").seq
    stream = re.search(r'data-stream-url="([^"]+)"', fragment)
    assert stream and stream.group(1).endswith(f"/runs/{run.pk}/stream/?after={resumed_seq}")
    assert f'<div class="msg assistant" id="run-{run.pk}" data-stream-url=' in fragment
    assert resume_form(chat, run) not in fragment  # queued now: Stop instead
    assert "upstream is down" not in fragment  # the failed answer: an earlier version now
    assert 'class="segment' not in fragment  # the failed round's empty one: not shown
    assert Run.objects.get(pk=run.pk).status == "queued"

    assert execute_run(run.pk) == "succeeded"
    page = bob.get(f"/t/acme/chat/{chat.pk}/").content.decode()
    assert "Back again." in page and resume_form(chat, run) not in page
    assert "upstream is down" not in page and page.count('class="segment') == 1
    entry = AuditEntry.objects.get(action="run.resumed")
    assert (entry.user, entry.object_id) == (trio.bob, str(run.pk))


def test_resume_is_not_offered_to_who_may_not_and_their_post_is_refused(
    trio, agent, provider_server
):
    chat, run = failed_turn(trio, agent, provider_server)
    Membership.objects.filter(tenant=trio.acme, user=trio.bob).update(role="viewer")
    bob = login(Client(), trio.bob)
    assert resume_form(chat, run) not in bob.get(f"/t/acme/chat/{chat.pk}/").content.decode()
    assert bob.post(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/resume/", **HTMX).status_code == 403

    Membership.objects.filter(tenant=trio.acme, user=trio.bob).update(role="member")
    agent.active = False  # bob may no longer use the agent
    agent.save()
    assert resume_form(chat, run) not in bob.get(f"/t/acme/chat/{chat.pk}/").content.decode()
    assert bob.post(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/resume/", **HTMX).status_code == 403
    # Another member's chat (an admin's too): 404, as every chat URL of it.
    alice = login(Client(), trio.alice)
    assert alice.post(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/resume/").status_code == 404
    assert Run.objects.get(pk=run.pk).status == "failed"
    assert not RunEvent.objects.filter(type="run.resumed").exists()
    assert not AuditEntry.objects.filter(action="run.resumed").exists()


def test_a_second_press_says_why_in_the_composers_notice(trio, agent, provider_server):
    chat, run = failed_turn(trio, agent, provider_server)
    bob = login(Client(), trio.bob)
    assert bob.post(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/resume/", **HTMX).status_code == 200
    again = bob.post(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/resume/", **HTMX)
    assert again["X-Chat-Status"] == "409" and again["HX-Retarget"] == "#composer-notice"
    assert "Not resumed: This run is queued: only a failed run can be resumed." in (
        again.content.decode()
    )
    assert RunEvent.objects.filter(run=run, type="run.resumed").count() == 1


def test_a_resume_past_the_members_request_budget_is_refused_in_the_notice(
    trio, agent, provider_server, rates
):
    chat, run = failed_turn(trio, agent, provider_server)
    rates("0/min", "100/min")
    refused = login(Client(), trio.bob).post(
        f"/t/acme/chat/{chat.pk}/runs/{run.pk}/resume/", **HTMX
    )
    assert refused["X-Chat-Status"] == "429" and refused["HX-Retarget"] == "#composer-notice"
    assert "Rate limit reached; retry in " in refused.content.decode()
    assert Run.objects.get(pk=run.pk).status == "failed"  # not resumed


@pytest.mark.django_db(transaction=True)  # the stream reads on threads of its own
def test_the_streams_footer_offers_resume_when_the_answer_failed(trio, agent, provider_server):
    chat, run = failed_turn(trio, agent, provider_server)
    response = login(Client(), trio.bob).get(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/stream/")

    async def read() -> str:
        return b"".join([chunk async for chunk in response.streaming_content]).decode()

    body = asyncio.run(read())
    assert '"op":"end"' in body
    assert f"/t/acme/chat/{chat.pk}/runs/{run.pk}/resume/" in body


def test_a_crews_failed_answer_is_resumed_from_the_chat(trio, connection, provider_server):
    researcher = make_agent(trio.acme, "researcher", instructions="Find facts.")
    writer = make_agent(trio.acme, "writer", instructions="Write.")
    crew = make_crew(trio.acme, "team", [researcher, writer])
    chat = conversation_save(tenant=trio.acme, changes={"crew": crew}, owner_user=trio.bob)
    provider_server.script("openai", TextReply("Facts."), ErrorReply(500, "upstream is down"))
    run = run_start(tenant=trio.acme, crew=crew, input="Write it up.", conversation=chat,
                    initiated_by=trio.bob, enqueue=False)  # fmt: skip
    assert execute_run(run.pk) == "failed"
    bob = login(Client(), trio.bob)
    assert resume_form(chat, run) in bob.get(f"/t/acme/chat/{chat.pk}/").content.decode()

    provider_server.script("openai", TextReply("The write-up."))
    assert bob.post(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/resume/", **HTMX).status_code == 200
    assert execute_run(run.pk) == "succeeded"
    page = bob.get(f"/t/acme/chat/{chat.pk}/").content.decode()
    assert "The write-up." in page and resume_form(chat, run) not in page
    assert Run.objects.filter(parent=run).count() == 2  # the researcher's answer reused
    assert len(provider_server.requests_to("/v1/chat/completions")) == 3
