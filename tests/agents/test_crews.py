"""Crews as run targets: child runs, parent links, usage roll-up, approvals in children."""

from __future__ import annotations

from agents.models import Agent, Approval, Crew, Run, RunEvent
from agents.runs import approval_decide, run_inline
from agents.runs.engine import execute_run
from tests.factories import make_agent, make_crew, make_tool
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply


def crew_of(tenant, mode, members, manager=None, **limits) -> Crew:
    """A crew of `mode` (its slug `<mode>-crew`) with `members` in order."""
    return make_crew(
        tenant, f"{mode}-crew", members, name=mode, mode=mode, manager=manager, **limits
    )


def agent_as(tenant, slug) -> Agent:
    """An agent told it is the `slug` (the researcher, the writer...)."""
    return make_agent(tenant, slug, instructions=f"You are the {slug}.")


def test_a_sequential_crew_runs_members_as_child_runs_in_order(trio, connection, provider_server):
    researcher, writer = agent_as(trio.acme, "researcher"), agent_as(trio.acme, "writer")
    crew = crew_of(trio.acme, "sequential", [researcher, writer])
    provider_server.script(
        "openai",
        TextReply("Water boils at 100C.", input_tokens=10, output_tokens=5),
        TextReply("At sea level water boils at 100C.", input_tokens=20, output_tokens=8),
    )
    run = run_inline(tenant=trio.acme, crew=crew, input="Explain boiling.", initiated_by=trio.alice)
    assert run.status == "succeeded" and run.output == "At sea level water boils at 100C."
    children = list(Run.objects.filter(parent=run).order_by("id"))
    assert [c.agent.slug for c in children] == ["researcher", "writer"]
    assert [c.child_key for c in children] == ["seq:0:researcher", "seq:1:writer"]
    assert all(c.status == "succeeded" and c.depth == 1 for c in children)
    assert (run.input_tokens, run.output_tokens) == (30, 13)  # rolled up
    second = provider_server.requests_to("/v1/chat/completions")[1].body["messages"][-1]["content"]
    assert "Explain boiling." in second and "Water boils at 100C." in second
    types = list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
    assert types == [
        "run.started",
        "crew.member.started",
        "crew.member.completed",
        "crew.member.started",
        "crew.member.completed",
        "run.completed",
    ]


def test_a_crews_members_share_their_tenants_tool_rate_limit(trio, connection, provider_server):
    make_tool(trio.acme, "calc", rate_limit_per_minute=1)
    researcher, writer = agent_as(trio.acme, "researcher"), agent_as(trio.acme, "writer")
    crew = crew_of(trio.acme, "sequential", [researcher, writer])
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("r1", "calc", '{"expression": "6*7"}')]),
        TextReply("42."),
        ToolCallReply([ToolCall("w1", "calc", '{"expression": "6*7"}')]),
        TextReply("The answer is 42."),
    )
    run = run_inline(tenant=trio.acme, crew=crew, input="6*7?")
    assert run.status == "succeeded" and run.output == "The answer is 42."
    first, second = Run.objects.filter(parent=run).order_by("id")
    assert not RunEvent.objects.filter(run=first, type="tool.rate_limited").exists()
    limited = RunEvent.objects.get(run=second, type="tool.rate_limited").payload
    assert (limited["call_id"], limited["name"], limited["limit"]) == ("w1", "calc", 1)


def test_a_parallel_crew_labels_its_members(trio, connection, provider_server):
    a, b = agent_as(trio.acme, "alpha"), agent_as(trio.acme, "beta")
    crew = crew_of(trio.acme, "parallel", [a, b])
    provider_server.script("openai", TextReply("same answer"), TextReply("same answer"))
    run = run_inline(tenant=trio.acme, crew=crew, input="go")
    assert run.status == "succeeded"
    assert run.output == "## alpha\nsame answer\n\n## beta\nsame answer"
    assert Run.objects.filter(parent=run).count() == 2


def test_an_approval_in_a_child_parks_the_parent_and_resumes_both(
    trio, connection, provider_server, transfer
):
    boss, payer = agent_as(trio.acme, "boss"), agent_as(trio.acme, "payer")
    crew = crew_of(trio.acme, "hierarchical", [payer], manager=boss)
    provider_server.script(
        "openai",
        ToolCallReply(
            [ToolCall("d1", "delegate_to_payer", '{"task": "pay 50"}')],
            input_tokens=7,
            output_tokens=3,
        ),
        ToolCallReply(
            [ToolCall("t1", "transfer", '{"amount": 50}')], input_tokens=11, output_tokens=2
        ),
    )
    parent = run_inline(tenant=trio.acme, crew=crew, input="Pay bob 50.", initiated_by=trio.alice)
    assert parent.status == "awaiting_approval", parent.error
    child = Run.objects.get(parent=parent)
    assert (child.status, child.child_key, child.agent) == (
        "awaiting_approval",
        "delegate:d1",
        payer,
    )
    assert RunEvent.objects.filter(run=parent, type="approval.required").exists()
    approval = Approval.objects.get(run__parent=parent)  # surfaces through the parent
    assert transfer.requests == []

    provider_server.script("openai", TextReply("Paid 50.", input_tokens=13, output_tokens=2))
    approval_decide(tenant=trio.acme, approval=approval, approved=True, by=trio.alice)
    assert execute_run(child.pk) == "succeeded"
    parent.refresh_from_db()
    assert parent.status == "queued"  # woken by its child

    provider_server.script(
        "openai", TextReply("Bob has been paid.", input_tokens=17, output_tokens=4)
    )
    assert execute_run(parent.pk) == "succeeded"
    parent.refresh_from_db()
    assert parent.output == "Bob has been paid."
    assert len(transfer.requests) == 1 and Run.objects.filter(parent=parent).count() == 1
    child.refresh_from_db()
    assert (child.input_tokens, child.output_tokens) == (24, 4)
    assert (parent.input_tokens, parent.output_tokens) == (7 + 17 + 24, 3 + 4 + 4)
    last = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert last["role"] == "tool" and "Paid 50." in last["content"]


def test_a_crew_run_records_its_limits_and_a_managers_loop_its_own_too(
    trio, connection, provider_server
):
    researcher, writer = agent_as(trio.acme, "researcher"), agent_as(trio.acme, "writer")
    writer.max_rounds = 4
    writer.save()
    crew = crew_of(
        trio.acme, "sequential", [researcher, writer], max_delegations=5, max_depth=2,
        token_budget=9000,
    )  # fmt: skip
    provider_server.script("openai", TextReply("Facts."), TextReply("Prose."))
    run = run_inline(tenant=trio.acme, crew=crew, input="Write.", initiated_by=trio.alice)
    assert run.status == "succeeded"
    assert run.limits == {"max_delegations": 5, "max_depth": 2, "token_budget": 9000}
    child = Run.objects.get(parent=run, agent=writer)
    assert child.limits["max_rounds"] == 4  # each member's run records its own

    boss = make_agent(trio.acme, "boss", max_rounds=3, max_tokens_per_run=700)
    managed = crew_of(trio.acme, "hierarchical", [researcher], manager=boss, max_delegations=1)
    provider_server.script("openai", TextReply("Nothing to delegate."))
    run = run_inline(tenant=trio.acme, crew=managed, input="Hi.", initiated_by=trio.alice)
    assert run.status == "succeeded", run.error
    assert run.limits == {
        "max_delegations": 1,
        "max_depth": 3,
        "token_budget": None,
        "max_rounds": 3,
        "max_tool_calls": 50,
        "max_tokens_per_run": 700,
        "max_tokens_per_response": 1024,
    }


def test_a_crew_without_members_fails_clearly(trio, connection):
    crew = make_crew(trio.acme, "empty")
    run = run_inline(tenant=trio.acme, crew=crew, input="hi")
    assert run.status == "failed" and "has no members" in run.error


def test_a_crew_is_a_chat_partner_with_history(trio, connection, provider_server):
    from agents.models import Conversation, Message

    writer = agent_as(trio.acme, "writer")
    crew = crew_of(trio.acme, "sequential", [writer])
    conversation = Conversation.objects.create(tenant=trio.acme, crew=crew, owner_user=trio.bob)
    provider_server.script("openai", TextReply("Hello Bob."), TextReply("You are Bob."))
    for text in ("I am Bob.", "Who am I?"):
        run = run_inline(
            tenant=trio.acme,
            crew=crew,
            input=text,
            conversation=conversation,
            initiated_by=trio.bob,
        )
        assert run.status == "succeeded"
    second = provider_server.requests_to("/v1/chat/completions")[1].body["messages"][-1]["content"]
    assert "User: I am Bob." in second and "Assistant: Hello Bob." in second
    turns = list(Message.objects.filter(conversation=conversation).values_list("role", "content"))
    assert turns == [
        ("user", "I am Bob."),
        ("assistant", "Hello Bob."),
        ("user", "Who am I?"),
        ("assistant", "You are Bob."),
    ]
