"""Outcome claims and their verification: a succeeded run records what it claims and the
evidence; a verdict is a separate record — by a person (service, REST, run page, chat), by
the agent's verifying tool (a direct call of the run's initiator, through the tool-call
step) — and the usage page shows the rates per agent."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.urls import reverse

from agents.models import Approval, Conversation, Run, Verification
from agents.runs import run_start
from agents.signals import run_succeeded
from agents.tasks import _verify_outcome, verify_outcome_task
from agents.verification import UNATTENDED, rates_by_agent, verify
from tenancy.models import Role
from tenancy.services import api_key_create
from tests.agents.test_confirmation import settle
from tests.api.test_resources import as_key, assert_error
from tests.factories import add_member, login, make_http_tool, make_user
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def orders(trio, connection):
    """acme's find_order tool, over real HTTP."""
    server = LocalServer()
    server.route("GET", "/orders", Reply(json={"order": "A-17", "status": "shipped"}))
    make_http_tool(trio.acme, "find_order", server.url + "/orders", description="Find an order.")
    yield server
    server.close()


def answered(trio, agent, provider_server, *, user=None, conversation=None, enqueue=True) -> Run:
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "find_order", '{"q": "A-17"}')]),
        TextReply("Your order A-17 has shipped."),
    )
    run = run_start(
        tenant=trio.acme,
        agent=agent,
        input="where is my order?",
        initiated_by=user or trio.bob,
        conversation=conversation,
        enqueue=enqueue,
    )
    run = settle(run)
    assert run.status == "succeeded", run.error
    return run


def test_a_succeeded_run_records_its_claim_and_evidence_and_is_not_verified(
    trio, agent, provider_server, orders
):
    run = answered(trio, agent, provider_server)
    assert run.claim["text"] == "Your order A-17 has shipped."
    [evidence] = run.claim["evidence"]
    assert evidence["tool"] == "find_order" and evidence["arguments"] == {"q": "A-17"}
    assert '"status": "shipped"' in evidence["result"] and evidence["is_error"] is False
    assert not Verification.objects.filter(run=run).exists()  # succeeded is not verified

    Run.objects.filter(pk=run.pk).update(status="failed", claim=None)
    with pytest.raises(ValidationError, match="Only a succeeded run"):
        verify(tenant=trio.acme, run=Run.objects.get(pk=run.pk), verdict="verified", by=trio.bob)


def test_who_may_verify_and_bad_verdicts(trio, agent, provider_server, orders):
    run = answered(trio, agent, provider_server)  # started by bob, a member
    carol = make_user("carol")
    add_member(trio.acme, carol, Role.MEMBER)
    dave = make_user("dave")
    add_member(trio.acme, dave, Role.VIEWER)
    for stranger in (carol, dave):
        with pytest.raises(PermissionDenied):
            verify(tenant=trio.acme, run=run, verdict="verified", by=stranger)
    with pytest.raises(Http404):
        verify(tenant=trio.globex, run=run, verdict="verified", by=trio.charlie)
    with pytest.raises(ValidationError, match="verdict"):
        verify(tenant=trio.acme, run=run, verdict="maybe", by=trio.bob)
    with pytest.raises(ValidationError, match="note"):
        verify(tenant=trio.acme, run=run, verdict="refuted", by=trio.bob, note="x" * 2001)
    assert not Verification.objects.exists()

    verify(tenant=trio.acme, run=run, verdict="refuted", by=trio.bob, note="Not yet shipped.")
    latest = verify(tenant=trio.acme, run=run, verdict="verified", by=trio.alice)  # an admin
    assert (latest.verdict, latest.source, latest.by_label) == ("verified", "person", "alice")
    assert [v.verdict for v in run.verifications.all()] == ["refuted", "verified"]


def test_rest_shows_the_claim_and_takes_verdicts(client, trio, agent, provider_server, orders):
    run = answered(trio, agent, provider_server, user=trio.alice)
    api = as_key(client, trio.acme, "read", "run")
    shown = api.get(f"/runs/{run.pk}").json()
    assert shown["claim"]["text"] == "Your order A-17 has shipped."
    assert shown["claim"]["evidence"][0]["tool"] == "find_order"
    assert shown["verifications"] == []

    made = api.post(f"/runs/{run.pk}/verifications", {"verdict": "refuted", "note": "Lost."})
    assert made.status_code == 201, made.content
    assert made.json()["verdict"] == "refuted" and made.json()["by"] == "API key test"
    assert api.get(f"/runs/{run.pk}").json()["verifications"][0]["note"] == "Lost."

    assert "verdict" in assert_error(api.post(f"/runs/{run.pk}/verifications", {}), 400)["details"]
    bad = api.post(f"/runs/{run.pk}/verifications", {"verdict": "verified", "extra": 1})
    assert_error(bad, 400)
    read_only = as_key(client, trio.acme, "read")
    assert_error(read_only.post(f"/runs/{run.pk}/verifications", {"verdict": "verified"}), 403)
    other = as_key(client, trio.globex, "read", "run")
    assert_error(other.post(f"/runs/{run.pk}/verifications", {"verdict": "verified"}), 404)
    assert Verification.objects.count() == 1


def test_the_run_page_and_the_chat_take_a_verdict_and_usage_shows_rates(
    client, trio, agent, provider_server, orders
):
    conversation = Conversation.objects.create(tenant=trio.acme, owner_user=trio.bob, agent=agent)
    run = answered(trio, agent, provider_server, conversation=conversation)
    login(client, trio.bob)
    page = client.get(reverse("activity:run", kwargs={"tenant_slug": "acme", "run_id": run.pk}))
    body = page.content.decode()
    assert "Outcome claim" in body and "Evidence: 1 tool result" in body
    assert "Not verified" in body and 'value="refuted"' in body
    chat = client.get(
        reverse(
            "chat:conversation", kwargs={"tenant_slug": "acme", "conversation_id": conversation.pk}
        )
    ).content.decode()
    assert f'id="verdict-{run.pk}"' in chat and 'value="verified"' in chat

    verify_url = reverse("activity:run_verify", kwargs={"tenant_slug": "acme", "run_id": run.pk})
    swapped = client.post(
        verify_url, {"verdict": "verified", "note": "Checked"}, HTTP_HX_REQUEST="true"
    )
    assert swapped.status_code == 200
    assert "<strong>Verified</strong> by bob: Checked" in swapped.content.decode()
    refused = client.post(verify_url, {"verdict": "perhaps"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 400 and "Choose one of" in refused.content.decode()

    carol = make_user("carol")
    add_member(trio.acme, carol, Role.MEMBER)
    login(client, carol)  # cannot see bob's run: 404, nothing recorded
    assert client.post(verify_url, {"verdict": "refuted"}).status_code == 404
    assert Verification.objects.count() == 1

    login(client, trio.alice)
    usage = client.get(reverse("activity:usage", kwargs={"tenant_slug": "acme"})).content.decode()
    assert 'id="outcomes-table"' in usage
    [row] = rates_by_agent(Run.objects.filter(tenant=trio.acme))
    assert (row["succeeded"], row["verified"], row["refuted"]) == (1, 1, 0)


def test_the_agents_verifying_tool_records_its_verdict(trio, agent, provider_server, orders):
    checker = LocalServer()
    checker.route("POST", "/check", Reply(json={"verified": False, "note": "No order A-17."}))
    make_http_tool(
        trio.acme,
        "check_order",
        checker.url + "/check",
        method="POST",
        description="Check a claim about an order.",
        input_schema={
            "type": "object",
            "properties": {
                "claim": {"type": "string"},
                "input": {"type": "string"},
                "evidence": {"type": "array"},
            },
        },
    )
    agent.verifier_tool = "check_order"
    agent.save()
    asked = []

    def capture(sender, run_id, tenant_id, **kwargs):
        asked.append((run_id, tenant_id))

    # In place of the task's receiver (a Celery worker of this session would take the
    # message and race the explicit call below): what finalize asks for.
    run_succeeded.disconnect(dispatch_uid="agents-run-succeeded")
    run_succeeded.connect(capture)
    try:
        run = answered(trio, agent, provider_server, enqueue=False)
    finally:
        run_succeeded.disconnect(capture)
        run_succeeded.connect(_verify_outcome, dispatch_uid="agents-run-succeeded")
    assert asked == [(run.pk, trio.acme.pk)]  # finalize asked for it

    verify_outcome_task(run.pk, trio.acme.pk)  # what the worker runs for that message
    [verdict] = Verification.objects.filter(run=run)
    assert (verdict.verdict, verdict.source, verdict.by_label) == ("refuted", "tool", "check_order")
    assert verdict.note == "No order A-17."
    [sent] = checker.requests
    assert sent.json()["claim"] == "Your order A-17 has shipped."
    assert sent.json()["evidence"][0]["tool"] == "find_order"

    checker.route("POST", "/check", Reply(json={"looks": "fine"}))  # another shape: no verdict
    verify_outcome_task(run.pk, trio.acme.pk)
    assert Verification.objects.filter(run=run).count() == 1
    checker.close()


@pytest.fixture
def checker(trio, agent, orders):
    """acme's check_order tool over real HTTP, the agent's verifying tool: says verified."""
    server = LocalServer()
    server.route("POST", "/check", Reply(json={"verified": True, "note": "Shipped."}))
    schema = {"type": "object", "properties": {"claim": {"type": "string"}}}
    make_http_tool(
        trio.acme, "check_order", server.url + "/check", method="POST", input_schema=schema
    )
    agent.verifier_tool = "check_order"
    agent.save()
    yield server
    server.close()


def unverified(trio, agent, provider_server, user=None) -> Run:
    """A succeeded run, its verification not yet asked for (the test calls the task)."""
    run_succeeded.disconnect(dispatch_uid="agents-run-succeeded")
    try:
        return answered(trio, agent, provider_server, user=user, enqueue=False)
    finally:
        run_succeeded.connect(_verify_outcome, dispatch_uid="agents-run-succeeded")


def test_the_verifying_tools_call_is_a_recorded_direct_call_of_the_runs_initiator(
    trio, agent, provider_server, checker
):
    run = unverified(trio, agent, provider_server)
    verify_outcome_task(run.pk, trio.acme.pk)
    assert Verification.objects.get(run=run).verdict == "verified"
    called = Run.objects.get(tenant=trio.acme, tool_name="check_order")
    assert (called.status, called.initiated_by_user) == ("succeeded", trio.bob)
    assert called.events.get(type="tool.started").payload["via"] == "verifier"


def test_a_verifying_tool_that_needs_approval_is_refused_nobody_can_approve_it(
    trio, agent, provider_server, checker
):
    ToolDefinition.objects.filter(name="check_order").update(requires_approval=True)
    run = unverified(trio, agent, provider_server)
    verify_outcome_task(run.pk, trio.acme.pk)
    assert checker.requests == [] and not Verification.objects.filter(run=run).exists()
    refused = Run.objects.get(tenant=trio.acme, tool_name="check_order")
    assert (refused.status, refused.error) == ("failed", UNATTENDED)
    assert refused.initiated_by_user == trio.bob and not Approval.objects.exists()


def test_a_run_of_a_key_limited_to_other_tools_is_not_verified_by_this_one(
    trio, agent, provider_server, checker
):
    key, _ = api_key_create(
        tenant=trio.acme, name="shop", scopes=["run"], allowed_tools=["find_order"]
    )
    run = unverified(trio, agent, provider_server, user=key)
    assert run.initiated_by_api_key == key
    verify_outcome_task(run.pk, trio.acme.pk)
    assert checker.requests == [] and not Verification.objects.filter(run=run).exists()
    assert not Run.objects.filter(tool_name="check_order").exists()
