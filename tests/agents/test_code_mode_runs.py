"""Code mode with the platform around it: runs executed by the engine on the real database,
the scripted provider server as the model, HTTP tools on local servers. A program's calls
are the run's calls: recorded, approved, and never repeated when the run is resumed."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async
from django.db.models.functions import Now

from agents.models import Approval, Run, RunEvent
from agents.runs import approval_decide, bridge, run_start
from agents.runs.engine import execute_run, execute_run_async
from tests.factories import make_agent, make_http_tool
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply

pytestmark = [pytest.mark.integration, pytest.mark.django_db]  # (Monty's worker processes)


@pytest.fixture
def shop(trio, connection) -> Iterator[LocalServer]:
    """acme's shop: `price` and `stock` (GETs) and `place_order` (a POST, not idempotent)."""
    server = LocalServer()
    server.route("GET", "/price", Reply(json={"price": 7}))
    server.route("GET", "/stock", Reply(json={"count": 3}))
    server.route("POST", "/orders", Reply(status=201, json={"order": "created"}))
    item = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}
    make_http_tool(trio.acme, "price", server.url + "/price", input_schema=item)
    make_http_tool(trio.acme, "stock", server.url + "/stock", input_schema=item)
    make_http_tool(
        trio.acme, "place_order", server.url + "/orders", method="POST", input_schema=item,
        effect="write", idempotent=False,
    )  # fmt: skip
    yield server
    server.close()


def coder(trio, *tools: str):
    return make_agent(
        trio.acme, "coder", instructions="Use run_code.", code_mode=True, use_all_tools=False,
        tool_names=list(tools),
    )  # fmt: skip


def script(provider_server, code: str, answer: str = "Done.") -> None:
    arguments = json.dumps({"code": code})
    provider_server.script(
        "openai", ToolCallReply([ToolCall("c1", "run_code", arguments)]), TextReply(answer)
    )


def last_message(provider_server) -> dict:
    return provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]


def requests(server: LocalServer, path: str) -> list:
    return [r for r in server.requests if r.path.split("?")[0] == path]


def test_a_program_calls_three_tools_and_the_model_reads_the_aggregate(trio, provider_server, shop):
    agent = coder(trio, "price", "stock", "calculator")
    script(
        provider_server,
        "p = price(item='widget')['price']\n"
        "n = stock(item='widget')['count']\n"
        "value = calculator(expression=f'{p} * {n}')['result']\n"
        "print('stock value', value)",
    )
    run = run_start(tenant=trio.acme, agent=agent, input="value?", initiated_by=trio.alice)

    assert execute_run(run.pk) == "succeeded"
    offered = provider_server.requests_to("/v1/chat/completions")[0].body["tools"]
    assert [t["function"]["name"] for t in offered] == ["run_code"]
    assert "def stock(*, item: str) -> Any" in offered[0]["function"]["description"]
    assert last_message(provider_server) == {
        "role": "tool", "tool_call_id": "c1", "content": "stock value 21",
    }  # fmt: skip
    started = RunEvent.objects.filter(run=run, type="tool.started").order_by("seq")
    assert [(e.payload["call_id"], e.payload["name"]) for e in started] == [
        ("c1", "run_code"), ("c1/1", "price"), ("c1/2", "stock"), ("c1/3", "calculator"),
    ]  # fmt: skip
    assert len(requests(shop, "/price")) == len(requests(shop, "/stock")) == 1


def test_a_call_needing_approval_parks_the_run_and_the_program_goes_on_once_approved(
    trio, provider_server, shop, transfer
):
    agent = coder(trio, "price", "transfer")
    script(
        provider_server,
        "p = price(item='widget')['price']\n"
        "transfer(amount=p * 10, to='bob')\n"
        "print('paid', p * 10)",
        answer="Paid bob 70.",
    )
    run = run_start(tenant=trio.acme, agent=agent, input="pay bob", initiated_by=trio.alice)

    assert execute_run(run.pk) == "awaiting_approval"
    approval = Approval.objects.get(run=run)
    assert (approval.call_id, approval.tool_name) == ("c1/2", "transfer")
    assert approval.arguments == {"amount": 70, "to": "bob"}
    assert approval.prepared_request["method"] == "POST"  # the exact request, as a direct call
    assert transfer.requests == []
    assert len(requests(shop, "/price")) == 1

    approval_decide(tenant=trio.acme, approval=approval, approved=True, by=trio.alice)
    assert execute_run(run.pk) == "succeeded"

    run.refresh_from_db()
    assert run.output == "Paid bob 70."
    assert len(transfer.requests) == 1  # approved, sent once
    assert transfer.requests[0].headers["idempotency-key"] == f"{run.pk}:c1/2"
    assert len(requests(shop, "/price")) == 1  # replayed from its record, not called again
    [replayed] = RunEvent.objects.filter(run=run, type="code.replayed")
    assert replayed.payload == {"call_id": "c1", "reused": ["c1/1"]}
    assert last_message(provider_server)["content"] == "paid 70"


def recorded(run_id: int, call_id: str) -> bool:
    state = Run.objects.values_list("state", flat=True).get(pk=run_id) or {}
    return call_id in state.get("results", {})


def test_a_worker_dying_mid_program_is_resumed_without_repeating_a_recorded_write(
    trio, provider_server, shop
):
    gate = threading.Event()

    def slow(request) -> dict:  # the program's third call waits while the worker "dies"
        gate.wait(10)
        return {"ok": True}

    shop.route("GET", "/check", Reply(echo=slow))
    make_http_tool(trio.acme, "check", shop.url + "/check")
    agent = coder(trio, "place_order", "check")
    script(
        provider_server,
        "place_order(item='a')\n"
        "place_order(item='b')\n"
        "check(q='x')\n"
        "place_order(item='c')\n"
        "print('ordered 3')",
    )
    run = run_start(tenant=trio.acme, agent=agent, input="order", initiated_by=trio.alice)

    async def die_mid_program() -> str:
        worker = asyncio.create_task(execute_run_async(run.pk))
        while not (requests(shop, "/check") and await sync_to_async(recorded)(run.pk, "c1/2")):
            await asyncio.sleep(0.02)  # (a condition polled: the third call is in flight)
        worker.cancel()  # the worker is gone; nothing more of it is written
        return await worker

    assert bridge.call(die_mid_program) == "lease lost"
    assert [r.json() for r in requests(shop, "/orders")] == [{"item": "a"}, {"item": "b"}]
    gate.set()
    Run.objects.filter(pk=run.pk).update(lease_expires_at=Now())  # its lease ran out

    assert execute_run(run.pk) == "succeeded"
    orders = [r.json()["item"] for r in requests(shop, "/orders")]
    assert orders == ["a", "b", "c"]  # a and b recorded: never sent again
    assert last_message(provider_server)["content"] == "ordered 3"
