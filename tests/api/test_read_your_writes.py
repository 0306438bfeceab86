"""Read your own writes, under load: whatever a caller has been told of a run's ending — a
`/v1` answer (Chat Completions, Responses, Messages; whole or streamed), a REST SSE
stream's terminal event (the run started streaming, or followed after its start), an MCP
`ask_*` result, the web chat's stream (its footer) — a read of the run right after shows the
same ending, over REST
(GET /api/v1/runs/{id}) and in the database (a statement of its own, on a connection of its
own): status, output, usage, finished_at and the terminal event as the run's last.

Every face at once, many callers each, against a real server: one whose web process
executes every run it follows itself (RUN_NEARBY_CONCURRENCY large: runs on the request's
loop, its stream given events before they are stored), and one whose Celery worker
executes them all (RUN_NEARBY_CONCURRENCY=0). The ending used to go out before the record
said so now and then (agents.runs.writer, "ENDING_EVENTS")."""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

import anthropic
import httpx2
import openai
import psycopg
import pytest
from django.db import connections
from django.test import Client
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from agents.services import conversation_save
from tenancy import services as tenancy
from tests import live_server
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)

PER_FACE = 8  # callers of each face, all faces at once: 80 calls in flight
ANSWER = "Read me back, all of it."
IN, OUT = 11, 4
HI = [{"role": "user", "content": "Hi"}]
TERMINAL = ("run.completed", "run.failed", "run.cancelled")
# Without limits of their own the callers would meet the per-key rate limit.
UNTHROTTLED = {"API_RATE_PER_KEY": "1000000/min", "API_RATE_PER_TENANT": "1000000/min"}


@pytest.fixture(scope="module")
def nearby_server(django_db_setup, django_db_blocker):
    """A web process that executes every run it follows itself."""
    with live_server.asgi_server({**UNTHROTTLED, "RUN_NEARBY_CONCURRENCY": "1000"}) as base:
        yield base


@pytest.fixture(scope="module")
def worker_server(django_db_setup, django_db_blocker):
    """A web process that has the Celery worker execute every run."""
    with live_server.asgi_server({**UNTHROTTLED, "RUN_NEARBY_CONCURRENCY": "0"}) as base:
        yield base


@pytest.fixture
def key(trio, agent, provider_server) -> str:
    """acme's key (read and run); every model call answers ANSWER."""
    provider_server.script("openai", *[TextReply(ANSWER, input_tokens=IN, output_tokens=OUT)] * 99)
    return tenancy.api_key_create(tenant=trio.acme, name="load", scopes=["read", "run"])[1]


@dataclass
class Told:
    """What a caller was told of its run's ending."""

    face: str
    run_id: int
    status: str
    output: str
    usage: tuple[int, int] | None = None  # (input, output) tokens, where the face says
    terminal_seq: int | None = None  # the seq of the terminal event it was sent


@dataclass
class Callers:
    """One client per kind for all the callers (a client's connections are reused)."""

    base: str
    key: str
    openai: openai.AsyncOpenAI
    anthropic: anthropic.AsyncAnthropic
    http: httpx2.AsyncClient
    mcp: ClientSession
    web: httpx2.AsyncClient  # signed in as bob, a member of acme
    chats: asyncio.Queue  # bob's conversations, one per web caller
    database: asyncio.Queue  # psycopg connections in autocommit (a read: a fresh snapshot)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


# -- the faces: each one call, then what its caller was told ---------------------------------
async def chat(c: Callers) -> Told:
    done = await c.openai.chat.completions.create(model="assistant", messages=HI)
    assert done.choices[0].finish_reason == "stop"
    usage = (done.usage.prompt_tokens, done.usage.completion_tokens)
    run_id = int(done.id.removeprefix("chatcmpl-"))
    return Told("chat", run_id, "succeeded", done.choices[0].message.content, usage)


async def chat_streamed(c: Callers) -> Told:
    text, usage, run_id, finish = [], None, 0, None
    stream = await c.openai.chat.completions.create(
        model="assistant", messages=HI, stream=True, stream_options={"include_usage": True}
    )
    async for chunk in stream:
        run_id = int(chunk.id.removeprefix("chatcmpl-"))
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
        if chunk.usage is not None:
            usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
    assert finish == "stop"
    return Told("chat_streamed", run_id, "succeeded", "".join(text), usage)


async def responses(c: Callers) -> Told:
    done = await c.openai.responses.create(model="assistant", input="Hi")
    assert done.status == "completed"
    usage = (done.usage.input_tokens, done.usage.output_tokens)
    run_id = int(done.id.removeprefix("resp_"))
    return Told("responses", run_id, "succeeded", done.output_text, usage)


async def responses_streamed(c: Callers) -> Told:
    completed = None
    async for event in await c.openai.responses.create(model="assistant", input="Hi", stream=True):
        if event.type == "response.completed":
            completed = event.response
    assert completed is not None and completed.status == "completed"
    usage = (completed.usage.input_tokens, completed.usage.output_tokens)
    run_id = int(completed.id.removeprefix("resp_"))
    return Told("responses_streamed", run_id, "succeeded", completed.output_text, usage)


def _told_by_message(face: str, done) -> Told:
    assert done.stop_reason == "end_turn"
    text = "".join(block.text for block in done.content if block.type == "text")
    usage = (done.usage.input_tokens, done.usage.output_tokens)
    return Told(face, int(done.id.removeprefix("msg_")), "succeeded", text, usage)


async def messages(c: Callers) -> Told:
    done = await c.anthropic.messages.create(model="assistant", max_tokens=100, messages=HI)
    return _told_by_message("messages", done)


async def messages_streamed(c: Callers) -> Told:
    async with c.anthropic.messages.stream(
        model="assistant", max_tokens=100, messages=HI
    ) as stream:
        return _told_by_message("messages_streamed", await stream.get_final_message())


async def _terminal_event(face: str, run_id: int, sse: httpx2.Response) -> Told:
    """What an SSE stream of a run's events said at its terminal event."""
    seq, kind = None, None
    async for line in sse.aiter_lines():
        if line.startswith("id:"):
            seq = int(line[3:])
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:") and kind in TERMINAL:
            payload = json.loads(line[5:])
            usage = (payload["usage"]["input_tokens"], payload["usage"]["output_tokens"])
            return Told(face, run_id, payload["status"], payload["output"], usage, seq)
    raise AssertionError(f"{face}: the stream of run {run_id} ended without a terminal event")


async def rest_streamed(c: Callers) -> Told:
    """POST /api/v1/runs with `stream`: the run's events as SSE, to the terminal one."""
    body = {"agent": "assistant", "input": "Hi", "stream": True}
    headers = {**c.auth, "Accept": "text/event-stream"}
    async with c.http.stream("POST", f"{c.base}/api/v1/runs", json=body, headers=headers) as sse:
        assert sse.status_code == 201
        return await _terminal_event("rest_streamed", int(sse.headers["X-Run-Id"]), sse)


async def rest_followed(c: Callers) -> Told:
    """POST /api/v1/runs, then GET its /events as SSE to the terminal one."""
    body = {"agent": "assistant", "input": "Hi"}
    started = await c.http.post(f"{c.base}/api/v1/runs", json=body, headers=c.auth)
    assert started.status_code == 201
    run_id = started.json()["id"]
    url = f"{c.base}/api/v1/runs/{run_id}/events"
    async with c.http.stream("GET", url, headers={**c.auth, "Accept": "text/event-stream"}) as sse:
        return await _terminal_event("rest_followed", run_id, sse)


async def mcp_ask(c: Callers) -> Told:
    result = await c.mcp.call_tool("ask_assistant", {"message": "Hi"})
    assert not result.is_error, result
    answer = result.structured_content
    return Told("mcp_ask", answer["run_id"], answer["status"], answer["answer"])


async def web_chat(c: Callers) -> Told:
    """A message sent in the chat page (htmx), then its answer's stream to the end: the
    text it appended, and whether its footer shows the run finished (or still offers
    Stop)."""
    page = f"{c.base}/t/acme/chat/{c.chats.get_nowait()}/"
    sent = await c.web.post(page + "send/", data={"message": "Hi"}, headers={"HX-Request": "true"})
    assert sent.status_code == 200, sent.text
    run_id = int(re.search(r"runs/(\d+)/stream/", sent.text)[1])
    text, footer, ended = [], "", False
    url = f"{page}runs/{run_id}/stream/?after=0"
    async with c.web.stream("GET", url, headers={"Accept": "text/event-stream"}) as sse:
        async for line in sse.aiter_lines():
            for op in json.loads(line[5:])["ops"] if line.startswith("data:") else []:
                target = op.get("target", "")
                if op["op"] == "append" and target.startswith(f"run-{run_id}-seg-"):
                    text.append(html.unescape(op["html"]))
                elif target == f"run-{run_id}-footer":
                    footer = op["html"]
                ended = ended or op["op"] == "end"
            if ended:
                break
    assert ended, f"web_chat: the stream of run {run_id} ended without its end"
    status = "succeeded" if "Rate this answer" in footer else f"shown as {footer.strip()[:80]!r}"
    return Told("web_chat", run_id, status, "".join(text))


FACES = [
    chat, chat_streamed, responses, responses_streamed, messages, messages_streamed,
    rest_streamed, rest_followed, mcp_ask, web_chat,
]  # fmt: skip


# -- what a read right after shows ------------------------------------------------------------
ROW = (
    "SELECT r.status, r.output, r.input_tokens, r.output_tokens, r.finished_at IS NOT NULL, "
    "r.last_seq, (SELECT max(e.seq) FROM agents_runevent e WHERE e.run_id = r.id AND e.type "
    "IN ('run.completed', 'run.failed', 'run.cancelled')) FROM agents_run r WHERE r.id = %s"
)


async def read_back(c: Callers, told: Told) -> list[str]:
    """How reads of the run made now differ from what its caller was told (none: [])."""
    wrong, name = [], f"{told.face}, run {told.run_id}"
    response = await c.http.get(f"{c.base}/api/v1/runs/{told.run_id}", headers=c.auth)
    run = response.json()
    rest = (run["status"], run["output"], run["finished_at"] is not None)
    if rest != (told.status, told.output, True):
        wrong.append(f"{name}: REST says {rest}, the caller was told {told.status!r}")
    usage = (run["usage"]["input_tokens"], run["usage"]["output_tokens"])
    if told.usage is not None and usage != told.usage:
        wrong.append(f"{name}: REST says usage {usage}, the caller was told {told.usage}")
    database = await c.database.get()
    try:
        cursor = await database.execute(ROW, [told.run_id])
        (
            status,
            output,
            tokens_in,
            tokens_out,
            finished,
            last_seq,
            terminal,
        ) = await cursor.fetchone()
    finally:
        c.database.put_nowait(database)
    if (status, output, finished) != (told.status, told.output, True):
        wrong.append(f"{name}: the row says {(status, output, finished)}")
    if told.usage is not None and (tokens_in, tokens_out) != told.usage:
        wrong.append(f"{name}: the row says usage {(tokens_in, tokens_out)}")
    if terminal is None or terminal != last_seq or told.terminal_seq not in (None, terminal):
        wrong.append(f"{name}: terminal event {terminal}, last_seq {last_seq}")
    return wrong


CSRF = "rywcsrf0" * 4  # the token the web callers send, as cookie and header


async def every_face_at_once(base: str, key: str, session: str, chats: list[int]) -> list[str]:
    """PER_FACE callers of every face at once, each reading its run back as soon as it is
    told how it ended; what differed. `session`: bob's session cookie, `chats`: his
    conversations (PER_FACE)."""
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    auth = {"Authorization": f"Bearer {key}"}
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(timeout=60))
        web = await stack.enter_async_context(
            httpx2.AsyncClient(
                timeout=60,
                cookies={"sessionid": session, "csrftoken": CSRF},
                headers={"X-CSRFToken": CSRF},
            )
        )
        read, write = await stack.enter_async_context(
            streamable_http_client(
                f"{base}/mcp",
                http_client=await stack.enter_async_context(
                    httpx2.AsyncClient(headers=auth, timeout=60)
                ),
            )
        )
        mcp = await stack.enter_async_context(ClientSession(read, write))
        await mcp.initialize()
        callers = Callers(
            base=base,
            key=key,
            openai=await stack.enter_async_context(
                openai.AsyncOpenAI(api_key=key, base_url=f"{base}/v1", max_retries=0, timeout=60)
            ),
            anthropic=await stack.enter_async_context(
                anthropic.AsyncAnthropic(api_key=key, base_url=base, max_retries=0, timeout=60)
            ),
            http=http,
            mcp=mcp,
            web=web,
            chats=asyncio.Queue(),
            database=asyncio.Queue(),
        )
        for chat_id in chats:
            callers.chats.put_nowait(chat_id)
        for _ in range(4):
            database = await psycopg.AsyncConnection.connect(**params, autocommit=True)
            stack.push_async_callback(database.close)
            callers.database.put_nowait(database)

        async def one(face: Callable[[Callers], Awaitable[Told]]) -> list[str]:
            told = await face(callers)
            assert told.output == ANSWER, told
            return await read_back(callers, told)

        found = await asyncio.gather(*(one(face) for face in FACES for _ in range(PER_FACE)))
    return [line for lines in found for line in lines]


@pytest.mark.parametrize("executed_by", ["nearby", "worker"])
def test_a_read_right_after_any_face_answers_shows_the_ending_it_told(
    request, executed_by, trio, agent, key, celery_worker_process
):
    base = request.getfixturevalue(f"{executed_by}_server")
    web = Client()
    web.force_login(trio.bob)
    chats = [
        conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob).pk
        for _ in range(PER_FACE)
    ]
    wrong = asyncio.run(every_face_at_once(base, key, web.cookies["sessionid"].value, chats))
    assert not wrong, f"{len(wrong)} reads differ from what callers were told:\n" + "\n".join(
        wrong[:20]
    )
