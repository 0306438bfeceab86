"""The run reader: iter_run_events replays then follows live, from any point, for late
joiners too; follow_run reads an answer from it (its text, then how the run ended)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agents.runs import run_inline, run_start
from agents.runs.engine import execute_run
from agents.runs.reader import Ending, follow_run, iter_run_events
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply


def execute_and_close(run_id: int) -> None:
    from django.db import connection

    try:
        execute_run(run_id)
    finally:
        connection.close()


async def collect(run, after_seq=0) -> list[dict]:
    return [event async for event in iter_run_events(run, after_seq)]


def script_two_rounds(provider_server, delay_s: float = 0.0) -> None:
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "1+1"}')], delay_s=delay_s),
        TextReply("Two, as the calculator says.", delay_s=delay_s),
    )


@pytest.mark.django_db(transaction=True)
def test_replay_from_the_start_and_from_the_middle_give_the_same_tail(trio, agent, provider_server):
    script_two_rounds(provider_server)
    run = run_inline(tenant=trio.acme, agent=agent, input="1+1?")
    everything = asyncio.run(collect(run))
    assert [e["seq"] for e in everything] == list(range(1, len(everything) + 1))
    assert everything[-1]["type"] == "run.completed"
    middle = everything[3]["seq"]
    assert asyncio.run(collect(run, middle)) == everything[4:]
    assert asyncio.run(collect(run, everything[-1]["seq"])) == []


@pytest.mark.django_db(transaction=True)
def test_live_consumers_and_late_joiners_miss_nothing(trio, agent, provider_server):
    script_two_rounds(provider_server, delay_s=0.3)
    run = run_start(tenant=trio.acme, agent=agent, input="1+1?", enqueue=False)

    async def watch() -> tuple[list[dict], list[dict]]:
        early = asyncio.create_task(collect(run))
        await asyncio.sleep(0.2)
        worker = threading.Thread(target=execute_and_close, args=(run.pk,))
        worker.start()
        await asyncio.sleep(0.5)  # join while the run is mid-way
        late = await collect(run)
        result = await early
        await asyncio.to_thread(worker.join)
        return result, late

    early, late = asyncio.run(watch())
    assert early == late
    assert [e["seq"] for e in early] == list(range(1, len(early) + 1))
    assert early[0]["type"] == "run.started" and early[-1]["type"] == "run.completed"
    assert "text.delta" in {e["type"] for e in early}


@pytest.mark.django_db(transaction=True)
def test_a_stream_of_a_finished_run_ends_at_once(trio, agent, provider_server):
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    events = asyncio.run(asyncio.wait_for(collect(run), timeout=5))
    assert events[-1]["type"] == "run.completed"


@pytest.mark.django_db(transaction=True)
def test_follow_run_gives_the_answers_text_then_its_ending(trio, agent, provider_server):
    script_two_rounds(provider_server)
    run = run_inline(tenant=trio.acme, agent=agent, input="1+1?")

    async def follow() -> list:
        return [item async for item in follow_run(run)]

    *text, ending = asyncio.run(asyncio.wait_for(follow(), timeout=10))
    assert "".join(text) == "Two, as the calculator says."
    assert isinstance(ending, Ending) and ending.status == "succeeded"
    assert ending.output == run.output and ending.finish_reason == "stop"
    assert ending.usage["total_tokens"] == run.input_tokens + run.output_tokens
