"""Resuming a failed crew run (agents.runs.resume): the members that answered are reused,
not asked again; the failed member goes on from its own checkpoint, its write not made
again; a hierarchical crew's manager goes on from the crew run's checkpoint. A member's
run alone is refused, pointing at its crew's run. Executed in this process on the local
provider server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client

from agents import runs
from agents.models import Run, RunEvent
from agents.runs.engine import execute_run
from tenancy.models import AuditEntry
from tests.factories import login, make_agent, make_crew, make_http_tool
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply

pytestmark = pytest.mark.django_db

COMPLETIONS = "/v1/chat/completions"


@pytest.fixture
def orders(trio) -> Iterator[LocalServer]:
    """acme's `place_order`: a non-idempotent POST that creates an order each time."""
    server = LocalServer()
    server.route("POST", "/orders", Reply(status=201, json={"order": "created"}))
    make_http_tool(
        trio.acme,
        "place_order",
        server.url + "/orders",
        method="POST",
        input_schema={"type": "object", "properties": {"item": {"type": "string"}}},
        effect="write",
        idempotent=False,
    )
    try:
        yield server
    finally:
        server.close()


def types_of(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def test_a_sequential_crew_resumed_reuses_the_member_that_answered_and_repeats_no_write(
    trio, connection, provider_server, orders
):
    researcher = make_agent(trio.acme, "researcher", instructions="Find facts.")
    buyer = make_agent(trio.acme, "buyer", instructions="Order.", approval_policy="never")
    crew = make_crew(trio.acme, "shop", [researcher, buyer])
    provider_server.script(
        "openai",
        TextReply("Widgets are good."),  # the researcher answers
        ToolCallReply([ToolCall("call_1", "place_order", '{"item": "widget"}')]),  # the buyer
        ErrorReply(500, "upstream is down"),  # ... whose provider is down (no retries left)
    )
    run = runs.run_start(tenant=trio.acme, crew=crew, input="Buy a widget.", enqueue=False,
                         initiated_by=trio.alice)  # fmt: skip
    assert execute_run(run.pk) == "failed"
    run.refresh_from_db()
    assert "member buyer ended failed" in run.error
    first, second = Run.objects.filter(parent=run).order_by("pk")
    assert (first.status, second.status) == ("succeeded", "failed")
    assert second.state is not None and len(orders.requests) == 1
    assert len(provider_server.requests_to(COMPLETIONS)) == 3

    alice = login(Client(), trio.alice)
    page = alice.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert f'action="/t/acme/runs/{run.pk}/resume/"' in page  # the crew's run: Resume
    page = alice.get(f"/t/acme/runs/{second.pk}/").content.decode()
    assert "/resume/" not in page and f"resume its crew's run (#{run.pk})" in page

    provider_server.script("openai", TextReply("Ordered a widget."))  # the provider is back
    resumed = runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
    assert resumed.status == "queued"
    second.refresh_from_db()
    assert second.status == "queued"  # the crew engine executes it, by its key
    event = RunEvent.objects.get(run=run, type="run.resumed").payload
    assert event["by"] == "alice" and event["from_checkpoint"] is True
    assert (event["members_reused"], event["members_resumed"]) == ([first.pk], [second.pk])
    member_event = RunEvent.objects.get(run=second, type="run.resumed").payload
    assert member_event["by"] == "alice" and member_event["crew_run"] == run.pk
    assert member_event["from_checkpoint"] is True

    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.output == "Ordered a widget." and run.error == ""
    assert len(provider_server.requests_to(COMPLETIONS)) == 4  # the researcher not asked again
    assert len(orders.requests) == 1  # the buyer's recorded order reused: no second order
    assert list(Run.objects.filter(parent=run).order_by("pk")) == [first, second]
    assert Run.objects.get(pk=first.pk).finished_at == first.finished_at  # untouched
    last = provider_server.requests_to(COMPLETIONS)[-1].body["messages"][-1]
    assert last == {"role": "tool", "tool_call_id": "call_1", "content": '{"order": "created"}'}
    crew_types, buyer_types = types_of(run), types_of(second)
    assert crew_types.index("run.failed") < crew_types.index("run.resumed")
    assert crew_types[-1] == "run.completed"
    assert buyer_types.index("run.failed") < buyer_types.index("run.resumed")
    assert buyer_types[-1] == "run.completed" and buyer_types.count("tool.started") == 1
    page = alice.get(f"/t/acme/runs/{run.pk}/").content.decode()  # the crew's timeline
    assert page.index("Run failed") < page.index("Resumed by alice") < page.index("Run finished")
    assert "1 member run that answered reused, 1 failed one resumed" in page
    page = alice.get(f"/t/acme/runs/{second.pk}/").content.decode()  # the buyer's
    assert page.index("Run failed") < page.index("Resumed by alice") < page.index("Run finished")
    assert f"With its crew's run (#{run.pk}), from its last checkpoint" in page
    entry = AuditEntry.objects.get(action="run.resumed")
    assert (entry.actor_label, entry.object_id) == ("alice", str(run.pk))
    assert entry.details["crew"] == "shop" and entry.details["members_resumed"] == [second.pk]


def test_a_hierarchical_crew_resumed_goes_on_from_its_managers_checkpoint(
    trio, connection, provider_server
):
    boss = make_agent(trio.acme, "boss", instructions="Delegate.")
    researcher = make_agent(trio.acme, "researcher", instructions="Find facts.")
    crew = make_crew(trio.acme, "managed", [researcher], mode="hierarchical", manager=boss)
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("d1", "delegate_to_researcher", '{"task": "find facts"}')]),
        TextReply("Water boils at 100C."),  # the researcher
        ErrorReply(500, "upstream is down"),  # the manager's next round
    )
    run = runs.run_start(tenant=trio.acme, crew=crew, input="Explain.", enqueue=False,
                         initiated_by=trio.alice)  # fmt: skip
    assert execute_run(run.pk) == "failed"
    run.refresh_from_db()
    assert run.state is not None and "ProviderUnavailable" in run.error
    member = Run.objects.get(parent=run)
    assert member.status == "succeeded"

    provider_server.script("openai", TextReply("It boils at 100C."))
    runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
    event = RunEvent.objects.get(run=run, type="run.resumed").payload
    assert event["members_reused"] == [member.pk] and event["members_resumed"] == []
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.output == "It boils at 100C."
    assert len(provider_server.requests_to(COMPLETIONS)) == 4  # one more: the manager's
    assert list(Run.objects.filter(parent=run)) == [member]  # not delegated again
    last = provider_server.requests_to(COMPLETIONS)[-1].body["messages"][-1]
    assert last["role"] == "tool" and "Water boils at 100C." in last["content"]
    types = types_of(run)
    assert types.count("crew.member.started") == 1
    assert types.index("run.failed") < types.index("run.resumed") < len(types) - 1


def test_a_members_run_alone_is_refused_pointing_at_its_crews_run(trio, connection):
    member = make_agent(trio.acme, "researcher")
    crew = make_crew(trio.acme, "team", [member])
    parent = runs.run_start(tenant=trio.acme, crew=crew, input="hi", enqueue=False,
                            initiated_by=trio.alice)  # fmt: skip
    child = Run.objects.create(tenant=trio.acme, agent=member, parent=parent, child_key="s0",
                               initiated_by_user=trio.alice, correlation_id="c")  # fmt: skip
    Run.objects.filter(pk__in=[parent.pk, child.pk]).update(status="failed", error="down")
    child.refresh_from_db()
    with pytest.raises(runs.RunNotResumable, match=f"resume its crew's run \\(run {parent.pk}\\)"):
        runs.run_resume(tenant=trio.acme, run=child, by=trio.alice)
    assert Run.objects.get(pk=child.pk).status == "failed"
    assert not AuditEntry.objects.filter(action="run.resumed").exists()


def test_a_crew_whose_member_hit_its_round_limit_is_refused(trio, connection):
    member = make_agent(trio.acme, "researcher")
    crew = make_crew(trio.acme, "team", [member])
    parent = runs.run_start(tenant=trio.acme, crew=crew, input="hi", enqueue=False,
                            initiated_by=trio.alice)  # fmt: skip
    Run.objects.create(tenant=trio.acme, agent=member, parent=parent, child_key="seq:0:x",
                       status="max_rounds", initiated_by_user=trio.alice,
                       correlation_id="c")  # fmt: skip
    Run.objects.filter(pk=parent.pk).update(status="failed", error="member ended max_rounds")
    parent.refresh_from_db()
    with pytest.raises(runs.RunNotResumable, match="researcher ended max_rounds, not failed"):
        runs.run_resume(tenant=trio.acme, run=parent, by=trio.alice)
    assert Run.objects.get(pk=parent.pk).status == "failed"
    assert not RunEvent.objects.filter(type="run.resumed").exists()


def test_a_parallel_crew_resumed_asks_again_only_the_member_that_failed(
    trio, connection, provider_server
):
    alpha = make_agent(trio.acme, "alpha", instructions="One view.")
    beta = make_agent(trio.acme, "beta", instructions="Another view.")
    crew = make_crew(trio.acme, "panel", [alpha, beta], mode="parallel")
    # Both ask at once: whichever asks second finds the provider down.
    provider_server.script("openai", TextReply("A view."), ErrorReply(500, "upstream is down"))
    run = runs.run_start(tenant=trio.acme, crew=crew, input="Views?", enqueue=False,
                         initiated_by=trio.alice)  # fmt: skip
    assert execute_run(run.pk) == "failed"
    statuses = sorted(Run.objects.filter(parent=run).values_list("status", flat=True))
    assert statuses == ["failed", "succeeded"]

    provider_server.script("openai", TextReply("A view."))
    runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
    assert execute_run(run.pk) == "succeeded"
    assert len(provider_server.requests_to(COMPLETIONS)) == 3  # one more: the failed one's
    run.refresh_from_db()
    assert run.output == "## alpha\nA view.\n\n## beta\nA view."
    assert Run.objects.filter(parent=run, status="succeeded").count() == 2
