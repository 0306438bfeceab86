"""Credentials written into clear configuration (tools/runtime/credential_leaks.py), refused
by every model that stores a URL or headers, as the configuration compiler refuses them."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from agents.models import Agent
from providers.models import ProviderConnection
from tools.models import McpServerConnection, ToolDefinition
from tools.runtime.credential_leaks import credential_like, redacted_url, url_credential_problem


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("api_key", True),
        ("apiKey", True),
        ("X-Auth-Token", True),
        ("client_secret", True),
        ("Proxy-Authorization", True),
        ("sig", True),
        ("author", False),
        ("keyword", False),
        ("monkey", False),
        ("page", False),
    ],
)
def test_what_looks_like_a_credential(name, expected):
    assert credential_like(name) is expected


@pytest.mark.parametrize(
    ("url", "leaks"),
    [
        ("https://bot:pw@api.example.com/x", True),
        ("https://api.example.com/x?access_token=1", True),
        ("https://api.example.com/x?q=1&author=me", False),
        ("https://api.example.com/{id}/x", False),
        ("https://[::1/x", False),  # not a URL: its own check says so
    ],
)
def test_urls_carrying_credentials(url, leaks):
    assert (url_credential_problem(url) is not None) is leaks


@pytest.mark.django_db
def test_every_model_with_a_url_refuses_credentials_in_it(trio):
    tool = ToolDefinition(
        tenant=trio.acme,
        name="lookup",
        kind="http",
        description="Look up.",
        input_schema={"type": "object", "properties": {}},
        config={"url": "https://api.example.com/x?api_key=1"},
    )
    connection = ProviderConnection(
        tenant=trio.acme,
        name="vllm",
        kind="openai_compatible",
        preset="vllm",
        base_url="https://u:p@llm.example.com/v1",
        extra_headers={"X-Auth-Token": "abc"},
    )
    agent = Agent(
        tenant=trio.acme, slug="far", name="Far", kind="remote",
        remote_url="https://agents.example.com/a?token=abc",
    )  # fmt: skip
    mcp = McpServerConnection(
        tenant=trio.acme, name="crm", url="https://mcp.example.com/mcp?key=abc"
    )
    expected = [
        (tool, {"config"}),
        (connection, {"base_url", "extra_headers"}),
        (agent, {"remote_url"}),
        (mcp, {"url"}),
    ]
    for instance, fields in expected:
        with pytest.raises(ValidationError) as caught:
            instance.full_clean()
        assert fields <= set(caught.value.message_dict), caught.value.message_dict


@pytest.mark.django_db
def test_fixed_credential_values_of_an_http_tool_are_refused(trio):
    tool = ToolDefinition(
        tenant=trio.acme,
        name="lookup",
        kind="http",
        description="Look up.",
        input_schema={"type": "object", "properties": {}},
        config={"url": "https://api.example.com/x", "fixed": {"headers": {"X-Api-Key": "a"}}},
    )
    with pytest.raises(ValidationError) as caught:
        tool.full_clean()
    assert (
        caught.value.message_dict["config"][0]
        == "fixed.headers.X-Api-Key: looks like a credential: use config.auth with a secret"
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://a.example.com/x?q=1", "https://a.example.com/x?q=1"),
        ("https://bot:pw@a.example.com/x", "https://redacted@a.example.com/x"),
        (
            "https://a.example.com/x?api_key=pw&q=1",
            "https://a.example.com/x?api_key=[redacted]&q=1",
        ),
        ("https://[::1/x", "https://[::1/x"),
    ],
)
def test_redacted_urls_keep_everything_but_the_credential(url, shown):
    assert redacted_url(url) == shown
