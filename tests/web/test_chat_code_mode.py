"""A code-mode program in the chat (Django's test client): the `run_code` card shows the
program as code and its tool calls as cards inside it, on the page and in the live stream;
the run page shows the code and a replay. The browser's view is
tests/browser/test_chat_code_mode.py."""

from __future__ import annotations

import asyncio
import html
import json

import pytest

from agents.models import Run, RunEvent
from agents.runs import run_start
from agents.services import conversation_save
from tests.factories import login, make_agent

pytestmark = pytest.mark.django_db(transaction=True)  # the stream reads on threads of its own

CODE = "p = price(item='<b>widget</b>')['price']\nprint('total', p * 3)"
EVENTS = [
    ("tool.started", {"call_id": "c1", "name": "run_code", "arguments": {"code": CODE}}),
    ("tool.started", {"call_id": "c1/1", "name": "price", "arguments": {"item": "<b>widget</b>"}}),
    ("tool.completed", {"call_id": "c1/1", "name": "price", "result": {"price": 7},
                        "error": None, "latency_ms": 3}),
    # a resumed run replaying the program starts its in-flight call again: the same card
    ("tool.started", {"call_id": "c1/2", "name": "stock", "arguments": {"item": "w"}}),
    ("tool.started", {"call_id": "c1/2", "name": "stock", "arguments": {"item": "w"}}),
    ("tool.completed", {"call_id": "c1/2", "name": "stock", "result": None,
                        "error": "stock failed: down", "latency_ms": 2}),
    # a call refused before it starts (a rejection, a limit) has only its completion
    ("tool.completed", {"call_id": "c1/3", "name": "order", "result": None,
                        "error": "rejected by alice", "latency_ms": 0}),
    ("code.replayed", {"call_id": "c1", "reused": ["c1/1"]}),
    ("tool.completed", {"call_id": "c1", "name": "run_code", "result": "total 21",
                        "error": None, "latency_ms": 40}),
    ("run.completed", {"status": "succeeded", "output": "21"}),
]  # fmt: skip


def test_a_program_shows_as_code_with_its_calls_inside_on_the_page_and_in_the_stream(client, trio):
    coder = make_agent(trio.acme, "coder", code_mode=True)
    chat = conversation_save(tenant=trio.acme, changes={"agent": coder}, owner_user=trio.bob)
    run = run_start(
        tenant=trio.acme, agent=coder, input="total?", conversation=chat, initiated_by=trio.bob
    )
    for seq, (type, payload) in enumerate(EVENTS, 1):
        RunEvent.objects.create(tenant=trio.acme, run=run, seq=seq, type=type, payload=payload)
    Run.objects.filter(pk=run.pk).update(status="succeeded", output="21")

    page = login(client, trio.bob).get(f"/t/acme/chat/{chat.pk}/").content.decode()
    thread = page[page.index('id="thread"') :]
    program = thread[thread.index('class="tool-card program-card done"') :]
    assert ">Program</span>" in program and "3 tool calls" in program
    assert f'<pre class="code"><code>{html.escape(CODE)}</code></pre>' in program
    calls = program[program.index('class="program-calls"') : program.index(">Output</p>")]
    assert calls.count('class="tool-card') == 3  # inside the program's card, once each
    assert '<code class="tool-name">price</code>' in calls and "stock failed: down" in calls
    assert "rejected by alice" in calls
    assert "&lt;b&gt;widget" in calls and "<b>widget" not in page  # escaped, never HTML
    assert "total 21" in program

    response = client.get(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/stream/")

    async def read() -> str:
        return b"".join([chunk async for chunk in response.streaming_content]).decode()

    ops = [
        op
        for line in asyncio.run(read()).splitlines()
        if line.startswith("data: ")
        for op in json.loads(line[6:])["ops"]
        if op.get("target", "").startswith("tool-")
    ]
    program_id = ops[0]["target"]
    assert ops[0]["parent"] == f"run-{run.pk}-steps"
    nested = [op for op in ops if op["target"] != program_id]
    assert len(nested) == 6 and {op["parent"] for op in nested} == {f"{program_id}-calls"}
    assert len({op["target"] for op in nested}) == 3  # a call started again: its own card
    last = ops[-1]
    assert last["target"] == program_id and last["html"].count('class="tool-card') == 4


def test_the_run_page_shows_the_program_as_code_and_its_replay(client, trio):
    coder = make_agent(trio.acme, "coder", code_mode=True)
    run = run_start(tenant=trio.acme, agent=coder, input="total?", initiated_by=trio.bob)
    for seq, (type, payload) in enumerate(EVENTS, 1):
        RunEvent.objects.create(tenant=trio.acme, run=run, seq=seq, type=type, payload=payload)
    Run.objects.filter(pk=run.pk).update(status="succeeded", output="21")

    body = login(client, trio.bob).get(f"/t/acme/runs/{run.pk}/").content.decode()
    program = body[body.index("Tool call <code>run_code</code>") :]
    assert f'<p class="label">Code</p><pre class="code">{html.escape(CODE)}</pre>' in program
    assert "Program replayed" in body
    assert "not made again: <code>c1/1</code></p>" in body
