"""Agents, runs, approvals, facts and conversations in the tenant-scoped admin."""

from __future__ import annotations

import json
import re

import pytest

from agents.models import Agent, Approval, Conversation, Fact, Message, Run, RunEvent
from agents.runs import run_inline, run_start
from agents.runs.engine import execute_run
from agents.seed import seed_demo_agent
from providers.models import ProviderConnection
from tenancy.models import AuditEntry
from tests.conftest import PAY_SECRET
from tests.factories import login, make_approval, make_connection
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}


def agent_form(**overrides) -> dict:
    data = {
        "name": "Assistant",
        "slug": "assistant",
        "description": "",
        "active": "on",
        "instructions": "Be brief.",
        "output_schema": "",
        "approval_policy": "flagged",
        "memory_scope": "person",
        "provider_connection": "",
        "model": "",
        "temperature": "",
        "use_all_tools": "on",
        "tool_names": "",
        "tool_tags": "",
        "tool_exclude": "",
        "max_rounds": "10",
        "max_tool_calls": "50",
        "max_tokens_per_run": "",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def tools_table(page: str) -> str:
    match = re.search(r'<table id="effective-tools">.*?</table>', page, re.S)
    assert match, "no effective tool list on the page"
    return match.group(0)


@pytest.fixture
def parked(trio, agent):
    """A run parked on two pending tool calls, as the loop leaves it."""
    run = Run.objects.create(
        tenant=trio.acme,
        agent=agent,
        status="awaiting_approval",
        input="Delete the old files.",
        correlation_id="corr-1",
    )
    first, second = (
        make_approval(run, "delete_file", call_id, arguments=args)
        for call_id, args in [("c1", {"path": "/tmp/a"}), ("c2", {"path": "/tmp/b"})]
    )
    return run, first, second


def act(client, action: str, *approvals, **extra):
    data = {"action": action, "_selected_action": [a.pk for a in approvals], "index": 0, **extra}
    return client.post("/admin/agents/approval/", data, follow=True)


# -- agents --------------------------------------------------------------------------
def test_owner_lists_and_edits_agents_and_sees_the_effective_tools(client, trio, agent):
    login(client, trio.alice)
    listing = client.get("/admin/agents/agent/").content.decode()
    assert "Assistant" in listing and "connection default" in listing
    assert f"/admin/agents/agent/{agent.pk}/try/" in listing
    url = f"/admin/agents/agent/{agent.pk}/change/"
    page = client.get(url).content.decode()
    assert f"/admin/agents/agent/{agent.pk}/try/" in page
    table = tools_table(page)
    for name in ("calculator", "think", "current_time"):
        assert f"<code>{name}</code>" in table
    assert "remember_fact" not in table and "final_answer" not in table

    form = agent_form(
        use_all_tools=None,
        tool_names="calculator, nosuchtool",
        memory="on",
        output_schema=json.dumps(SCHEMA),
        model="gpt-test-large",
    )
    refused = client.post(url, form)  # the compiled configuration names no such tool
    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert errors["tool_names"] == ["[1]: unknown tool 'nosuchtool'"]
    response = client.post(url, {**form, "tool_names": "calculator"})
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.tool_names == ["calculator"] and agent.memory
    assert agent.output_schema == SCHEMA and agent.version == 2
    # A name stored before it was refused (or of a tool deleted since) is shown, ignored.
    Agent.objects.filter(pk=agent.pk).update(tool_names=["calculator", "nosuchtool"])
    page = client.get(url).content.decode()
    table = tools_table(page)
    assert "<code>calculator</code>" in table and "<code>think</code>" not in table
    assert "<code>remember_fact</code>" in table and "memory" in table
    assert "<code>final_answer</code>" in table and "structured output" in table
    assert "Unknown tool names (ignored): nosuchtool" in page


def test_the_admin_sets_answering_from_tool_results_without_tools(client, trio, agent):
    login(client, trio.alice)
    url = f"/admin/agents/agent/{agent.pk}/change/"
    assert 'name="results_without_tools"' in client.get(url).content.decode()
    assert client.post(url, agent_form(results_without_tools="on")).status_code == 302
    agent.refresh_from_db()
    assert agent.results_without_tools


def test_an_invalid_output_schema_is_a_field_error_and_nothing_is_saved(client, trio, agent):
    login(client, trio.alice)
    bad = json.dumps({"type": "object", "properties": {"answer": {"type": "txt"}}})
    response = client.post("/admin/agents/agent/add/", agent_form(slug="other", output_schema=bad))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "output_schema is not valid JSON Schema" in errors["output_schema"][0]
    not_json = client.post(
        "/admin/agents/agent/add/", agent_form(slug="other", output_schema="{oops")
    )
    assert "Enter a valid JSON" in not_json.context["adminform"].form.errors["output_schema"][0]
    change = client.post(
        f"/admin/agents/agent/{agent.pk}/change/", agent_form(output_schema='{"type": "array"}')
    )
    assert (
        'must have "type": "object"' in change.context["adminform"].form.errors["output_schema"][0]
    )
    # The tool list is that of the saved agent, not of the rejected POST.
    assert "<code>think</code>" in tools_table(change.content.decode())
    assert Agent.objects.count() == 1
    agent.refresh_from_db()
    assert agent.output_schema is None and agent.version == 1


def test_new_agents_land_in_the_admins_tenant_with_its_own_connections(client, trio, connection):
    theirs = make_connection(trio.globex, "Globex key", "openai")
    login(client, trio.alice)
    page = client.get("/admin/agents/agent/add/").content.decode()
    assert "Local OpenAI" in page and "Globex key" not in page
    refused = client.post(
        "/admin/agents/agent/add/", agent_form(slug="helper", provider_connection=theirs.pk)
    )
    assert "provider_connection" in refused.context["adminform"].form.errors
    response = client.post(
        "/admin/agents/agent/add/", agent_form(slug="helper", provider_connection=connection.pk)
    )
    assert response.status_code == 302
    created = Agent.objects.get(slug="helper")
    assert created.tenant == trio.acme and created.provider_connection == connection


def test_the_try_page_runs_the_agent_and_shows_the_answer_and_timeline(
    client, trio, agent, provider_server
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')], input_tokens=20),
        TextReply("It is 42.", input_tokens=30, output_tokens=4),
    )
    login(client, trio.alice)
    url = f"/admin/agents/agent/{agent.pk}/try/"
    assert 'name="message"' in client.get(url).content.decode()
    page = client.post(url, {"message": "6 times 7?"}).content.decode()
    run = Run.objects.get()
    assert run.status == "succeeded" and run.initiated_by_user == trio.alice
    assert re.search(r'id="run-answer"[^>]*>It is 42\.</div>', page)
    assert "<strong>succeeded</strong>" in page and "50 in / 9 out" in page
    assert f"/admin/agents/run/{run.pk}/change/" in page
    timeline = re.search(r'<table id="run-timeline">.*?</table>', page, re.S).group(0)
    for event in ("run.started", "tool.started", "tool.completed", "run.completed"):
        assert f"<code>{event}</code>" in timeline
    assert "6*7" in timeline and "&quot;result&quot;: 42" in timeline


def test_the_try_page_refuses_bad_input_and_shows_a_failed_run(client, trio, agent):
    ProviderConnection.objects.all().delete()
    login(client, trio.alice)
    url = f"/admin/agents/agent/{agent.pk}/try/"
    assert "This field is required" in client.post(url, {"message": "   "}).content.decode()
    Agent.objects.filter(pk=agent.pk).update(active=False)
    assert "This agent is not active." in client.post(url, {"message": "hi"}).content.decode()
    assert not Run.objects.exists()
    Agent.objects.filter(pk=agent.pk).update(active=True)
    page = client.post(url, {"message": "hello"}).content.decode()
    assert "<strong>failed</strong>" in page and 'id="run-error"' in page
    assert "no provider connection" in page


# -- runs ----------------------------------------------------------------------------
def test_the_try_page_past_the_admins_request_budget_runs_nothing(
    client, trio, agent, provider_server, rates
):
    rates("1/min", None)
    provider_server.script("openai", TextReply("Hello."))
    login(client, trio.alice)
    url = f"/admin/agents/agent/{agent.pk}/try/"
    assert client.post(url, {"message": "hello"}).status_code == 200
    refused = client.post(url, {"message": "again"})
    assert refused.status_code == 429
    assert re.search(r"Rate limit reached; retry in \d+ s\.", refused.content.decode())
    assert Run.objects.count() == 1


def test_runs_are_read_only_and_show_their_timeline(client, trio, agent, provider_server):
    provider_server.script("openai", TextReply("Hello there."))
    run = run_inline(tenant=trio.acme, agent=agent, input="hi", initiated_by=trio.alice)
    login(client, trio.alice)
    listing = client.get("/admin/agents/run/").content.decode()
    assert f"/admin/agents/run/{run.pk}/change/" in listing and "gpt-test" in listing
    assert "By status" in listing and "By agent" in listing
    filtered = client.get("/admin/agents/run/", {"status__exact": "failed"}).content.decode()
    assert f"/admin/agents/run/{run.pk}/change/" not in filtered

    url = f"/admin/agents/run/{run.pk}/change/"
    page = client.get(url).content.decode()
    assert "Hello there." in page and 'name="_save"' not in page
    timeline = re.search(r'<table id="run-timeline">.*?</table>', page, re.S).group(0)
    types = re.findall(r"<td><code>([a-z._]+)</code></td>", timeline)
    assert types == list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
    assert types[0] == "run.started" and types[-1] == "run.completed"
    assert "<details><summary>Checkpoint" in page  # the state, collapsed

    assert client.post(url, {"status": "failed"}).status_code == 403
    assert client.get("/admin/agents/run/add/").status_code == 403
    assert client.post(f"/admin/agents/run/{run.pk}/delete/", {"post": "yes"}).status_code == 403
    run.refresh_from_db()
    assert run.status == "succeeded"


def test_queued_runs_can_be_cancelled_from_the_list(client, trio, agent):
    run = Run.objects.create(tenant=trio.acme, agent=agent, input="x", correlation_id="q")
    login(client, trio.alice).post(
        "/admin/agents/run/", {"action": "cancel_selected", "_selected_action": [run.pk]}
    )
    run.refresh_from_db()
    assert run.status == "cancelled"


# -- approvals -----------------------------------------------------------------------
def test_approving_the_last_pending_call_queues_the_run_again(client, trio, parked):
    run, first, second = parked
    login(client, trio.alice)
    listing = client.get("/admin/agents/approval/").content.decode()
    assert "delete_file" in listing and "/tmp/a" in listing and f"Run {run.pk}" in listing
    page = client.get(f"/admin/agents/approval/{first.pk}/change/").content.decode()
    assert 'value="approve_selected"' in page

    act(client, "approve_selected", first)
    first.refresh_from_db()
    run.refresh_from_db()
    assert first.status == "approved" and first.decided_by == trio.alice
    assert run.status == "awaiting_approval"  # the second call still waits

    page = act(client, "approve_selected", second).content.decode()
    run.refresh_from_db()
    assert run.status == "queued"
    assert f"Approved 1 tool call(s). Run(s) {run.pk} queued to resume." in page
    assert "/tmp/b" not in page  # the list shows pending calls by default


def test_rejecting_asks_for_a_reason_first(client, trio, parked):
    run, first, second = parked
    login(client, trio.alice)
    form = act(client, "reject_selected", first, second).content.decode()
    assert 'name="reason"' in form and "Rejected in the admin." in form
    assert Approval.objects.filter(status="pending").count() == 2
    act(client, "reject_selected", first, second, apply="1", reason="Not these files.")
    statuses = set(Approval.objects.values_list("status", "reason"))
    assert statuses == {("rejected", "Not these files.")}
    run.refresh_from_db()
    assert run.status == "queued"


def test_deciding_twice_is_a_message_not_an_error(client, trio, parked):
    _, first, _ = parked
    login(client, trio.alice)
    act(client, "approve_selected", first)
    response = act(client, "reject_selected", first, apply="1", reason="Changed my mind.")
    assert response.status_code == 200
    message = f"Tool call #{first.pk} (delete_file): This call was already approved."
    assert message in response.content.decode()
    first.refresh_from_db()
    assert first.status == "approved"


# -- facts and conversations ---------------------------------------------------------
def test_shared_facts_and_conversations_are_listed_with_their_messages(client, trio, agent):
    """A person's facts are theirs to govern (their memory page): the admin lists the shared
    ones, read-only (forgetting them is audited: the next test)."""
    Fact.objects.create(tenant=trio.acme, scope="agent", agent=agent, text="The office opens at 9.")
    Fact.objects.create(tenant=trio.acme, user=trio.bob, text="Bob likes tea.")
    Fact.objects.create(tenant=trio.globex, scope="tenant", text="Charlie's office is closed.")
    conversation = Conversation.objects.create(
        tenant=trio.acme, agent=agent, owner_user=trio.bob, title="Tea time"
    )
    Message.objects.create(
        tenant=trio.acme, conversation=conversation, role="user", content="Any tea?"
    )
    login(client, trio.alice)
    facts = client.get("/admin/agents/fact/").content.decode()
    assert "The office opens at 9." in facts
    assert "Bob likes tea." not in facts and "closed" not in facts
    page = client.get(f"/admin/agents/conversation/{conversation.pk}/change/").content.decode()
    assert "Tea time" in page and "Any tea?" in page
    assert client.get("/admin/agents/conversation/add/").status_code == 403


def test_the_admin_forgets_shared_facts_audited_and_never_edits_or_adds_one(client, trio, agent):
    shared = Fact.objects.create(tenant=trio.acme, scope="tenant", text="Closed on Sundays.")
    again = Fact.objects.create(tenant=trio.acme, scope="agent", agent=agent, text="Opens at 9.")
    bobs = Fact.objects.create(tenant=trio.acme, user=trio.bob, text="Bob likes tea.")
    login(client, trio.alice)
    assert client.get("/admin/agents/fact/add/").status_code == 403
    change = client.post(f"/admin/agents/fact/{shared.pk}/change/", {"text": "Open daily."})
    assert change.status_code == 403
    assert client.get(f"/admin/agents/fact/{bobs.pk}/change/").status_code == 404  # his own
    deleted = client.post(f"/admin/agents/fact/{shared.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    bulk = {"action": "delete_selected", "_selected_action": [again.pk, bobs.pk], "post": "yes"}
    client.post("/admin/agents/fact/", bulk)
    assert list(Fact.objects.values_list("pk", flat=True)) == [bobs.pk]
    entries = AuditEntry.objects.filter(action="fact.forgotten").order_by("id")
    assert [(e.object_id, e.user) for e in entries] == [
        (str(shared.pk), trio.alice), (str(again.pk), trio.alice),
    ]  # fmt: skip
    assert all("Sunday" not in e.object_repr + str(e.details) for e in entries)


# -- tenancy -------------------------------------------------------------------------
def test_another_tenants_agent_run_try_page_and_approval_are_404(client, trio, parked):
    run, first, _ = parked
    fact = Fact.objects.create(tenant=trio.acme, user=trio.bob, text="Bob likes tea.")
    login(client, trio.charlie)
    agent_id = run.agent_id
    for url in [
        f"/admin/agents/agent/{agent_id}/change/",
        f"/admin/agents/agent/{agent_id}/try/",
        f"/admin/agents/run/{run.pk}/change/",
        f"/admin/agents/approval/{first.pk}/change/",
        f"/admin/agents/fact/{fact.pk}/change/",
    ]:
        assert client.get(url).status_code == 404, url
    assert client.post(f"/admin/agents/agent/{agent_id}/try/", {"message": "hi"}).status_code == 404
    assert "Assistant" not in client.get("/admin/agents/agent/").content.decode()
    act(client, "approve_selected", first)
    first.refresh_from_db()
    assert first.status == "pending" and not Run.objects.exclude(pk=run.pk).exists()


# -- seeding -------------------------------------------------------------------------
def test_seed_demo_agent_is_idempotent(trio):
    agent = seed_demo_agent(trio.acme)
    assert (agent.slug, agent.name, agent.tenant) == ("assistant", "Assistant", trio.acme)
    assert agent.use_all_tools and agent.memory and agent.provider_connection is None
    assert agent.instructions
    agent.name = "Renamed"
    agent.save()
    again = seed_demo_agent(trio.acme)
    assert again.pk == agent.pk and again.name == "Renamed"
    assert Agent.objects.filter(tenant=trio.acme).count() == 1
    assert seed_demo_agent(trio.globex).tenant == trio.globex


@pytest.mark.django_db(transaction=True)
def test_an_approval_shows_its_exact_request_masked_and_an_edit_asks_again(
    client, trio, agent, provider_server, pay
):
    provider_server.script(
        "openai", ToolCallReply([ToolCall("p1", "pay", '{"amount": 500, "to": "bob"}')])
    )
    run = run_start(tenant=trio.acme, agent=agent, input="pay bob", enqueue=False)
    execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    login(client, trio.alice)
    page = client.get(f"/admin/agents/approval/{approval.pk}/change/").content.decode()
    assert f"POST {pay.url}/payments/bob" in page and "Authorization: Bearer ***" in page
    assert "{&quot;amount&quot;:500}" in page and PAY_SECRET not in page
    edit_url = f"/admin/agents/approval/{approval.pk}/edit/"
    assert "Approve with edited arguments" in page and edit_url in page

    bad = client.post(edit_url, {"arguments": '{"amount": "x", "to": "bob"}'})
    assert bad.status_code == 200 and "invalid arguments" in bad.content.decode()
    assert client.post(edit_url, {"arguments": "[1]"}).status_code == 200
    approval.refresh_from_db()
    assert approval.status == "pending"

    done = client.post(edit_url, {"arguments": '{"amount": 5, "to": "bob"}'}, follow=True)
    approval.refresh_from_db()
    assert approval.status == "edited" and pay.requests == []
    again = approval.replaced_by
    assert done.redirect_chain[-1][0] == f"/admin/agents/approval/{again.pk}/change/"
    page = done.content.decode()
    assert "prepared again" in page and "{&quot;amount&quot;:5}" in page
    assert PAY_SECRET not in page

    login(client, trio.charlie)  # another tenant's owner
    assert client.get(edit_url).status_code == 404
    assert (
        client.post(f"/admin/agents/approval/{again.pk}/edit/", {"arguments": "{}"}).status_code
        == 404
    )
