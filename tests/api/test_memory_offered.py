"""Memory tools are offered to the runs of an agent that remembers only when the run has a
user (agents/tool_sources.py, `needs_user`): a member's run, or a key's run acting for a
member (`acts_for_members` and `user` on /v1); never a run of a key acting for nobody,
where they could only fail. Its prompt has no memory section then either."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agents.models import Fact, Run
from agents.runs.engine import execute_run
from agents.runtime.memory import MEMORY_TOOL_NAMES
from tenancy import services as tenancy
from tests.api.conftest import sdk
from tests.api.test_openai_compat import run_of
from tests.factories import make_agent
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

MEMORY = set(MEMORY_TOOL_NAMES)


@pytest.fixture
def pal(trio, connection):
    return make_agent(trio.acme, "pal", memory=True, instructions="Be kind.")


def offered(provider_server) -> tuple[set[str], str]:
    """The tools and the system prompt of the model's last request."""
    request = provider_server.requests_to("/v1/chat/completions")[-1]
    tools = {tool["function"]["name"] for tool in request.body.get("tools", [])}
    [system] = [m["content"] for m in request.body["messages"] if m["role"] == "system"]
    return tools, system


def rest_run(client: APIClient, capture, **headers) -> Run:
    """POST /api/v1/runs for the pal, then the run executed as a worker would."""
    with capture():
        response = client.post(
            "/api/v1/runs", {"agent": "pal", "input": "hi"}, format="json", **headers
        )
    assert response.status_code == 201, response.json()
    execute_run(response.json()["id"])
    return Run.objects.get(pk=response.json()["id"])


@pytest.mark.django_db
def test_rest_a_keys_run_is_not_offered_memory_and_a_members_run_is(
    trio, pal, provider_server, django_capture_on_commit_callbacks
):
    _, key = tenancy.api_key_create(tenant=trio.acme, name="ci", scopes=["read", "run"])
    keyed = APIClient()
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    run = rest_run(keyed, django_capture_on_commit_callbacks)
    assert run.status == "succeeded" and run.initiated_by_user is None
    tools, system = offered(provider_server)
    assert not tools & MEMORY and "## Memory" not in system

    bob = APIClient()
    bob.force_login(trio.bob)
    run = rest_run(bob, django_capture_on_commit_callbacks, HTTP_X_TENANT="acme")
    assert run.status == "succeeded" and run.initiated_by_user == trio.bob
    tools, system = offered(provider_server)
    assert tools >= MEMORY and "## Memory" in system


@pytest.mark.django_db(transaction=True)
def test_v1_a_keys_chat_is_not_offered_memory_and_a_members_chat_through_a_key_is(
    trio, pal, asgi_server, provider_server
):
    _, plain = tenancy.api_key_create(tenant=trio.acme, name="plain", scopes=["read", "run"])
    _, acting = tenancy.api_key_create(
        tenant=trio.acme, name="portal", scopes=["read", "run"], acts_for_members=True
    )
    hi = [{"role": "user", "content": "hi"}]
    for key, user in ((plain, None), (plain, "bob"), (acting, "not-a-member")):
        provider_server.script("openai", TextReply("Hi."))
        extra = {"user": user} if user else {}
        completion = sdk(asgi_server, key).chat.completions.create(
            model="pal", messages=hi, **extra
        )
        assert run_of(completion.id).initiated_by_user is None
        tools, system = offered(provider_server)
        assert not tools & MEMORY and "## Memory" not in system, (key, user)

    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("m1", "remember_fact", '{"fact": "Bob likes green tea."}')]),
        TextReply("Noted."),
    )
    completion = sdk(asgi_server, acting).chat.completions.create(
        model="pal", messages=[{"role": "user", "content": "I like green tea."}], user="bob"
    )
    assert run_of(completion.id).initiated_by_user == trio.bob
    tools, system = offered(provider_server)
    assert tools >= MEMORY and "## Memory" in system
    assert list(Fact.objects.values_list("user__username", "text")) == [
        ("bob", "Bob likes green tea.")
    ]


@pytest.mark.django_db
def test_rest_a_keys_run_gets_the_keys_own_memory_when_the_agent_allows_it(
    trio, connection, provider_server, django_capture_on_commit_callbacks
):
    """`memory_key_runs`: a key's runs (acting for no member) remember and recall the key's
    facts only — never a member's, never another key's."""
    make_agent(trio.acme, "pal", memory=True, memory_key_runs=True)
    Fact.objects.create(tenant=trio.acme, user=trio.bob, text="Bob's locker is 12.")
    clients = {}
    for name in ("portal", "other"):
        _, key = tenancy.api_key_create(tenant=trio.acme, name=name, scopes=["read", "run"])
        clients[name] = APIClient()
        clients[name].credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("m1", "remember_fact", '{"fact": "Users speak Dutch."}')]),
        TextReply("Noted."),
    )
    run = rest_run(clients["portal"], django_capture_on_commit_callbacks)
    tools, system = offered(provider_server)
    assert tools >= MEMORY and "## Memory" in system
    fact = Fact.objects.get(text="Users speak Dutch.")
    assert (fact.scope, fact.api_key, fact.user, fact.source_run) == (
        "key", run.initiated_by_api_key, None, run,
    )  # fmt: skip

    for name, expected in (("portal", ["Users speak Dutch."]), ("other", [])):
        provider_server.script(
            "openai",
            ToolCallReply([ToolCall("m1", "recall_facts", '{"query": "locker language"}')]),
            TextReply("ok"),
        )
        run = rest_run(clients[name], django_capture_on_commit_callbacks)
        result = run.events.get(type="tool.completed").payload["result"]
        assert [f["text"] for f in result["facts"]] == expected, name
