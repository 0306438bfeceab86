"""The suite's corpus of configuration documents the import refuses, gathered from the
tests of each rule (tests/agents/test_config_*.py, tests/api/test_config_api.py,
tests/test_config_command.py, tests/test_secret_destinations.py): each with the state of
acme it is imported into, and the document paths at which it must be refused (at least).

tests/agents/test_config_dry_run.py imports every one of them twice, as a dry run and for
real, and asserts that both refuse it with the same problems. A new rule of the import
adds its document here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.config_document import config_export
from agents.triggers import trigger_save
from providers.models import ProviderConnection
from tenancy.models import ApiKey, Role
from tenancy.policy import Principal
from tests.factories import (
    add_member,
    make_agent,
    make_connection,
    make_http_tool,
    make_mcp_connection,
    make_user,
)

Setup = Callable[[Any], None]  # the trio fixture's acme, globex, alice, bob, charlie
PLANTED = "sk-PLANTED-corpus-4242"
BEARER = {"auth": {"type": "bearer"}}
QUOTA = {"scope": "tenant", "metric": "tokens", "period": "day", "limit": 1000}
TRIGGER = {
    "name": "daily", "kind": "schedule", "agent": "support", "cron": "0 9 * * *",
    "timezone": "Europe/Berlin", "input_template": "Go", "run_as": "alice",
}  # fmt: skip
PRICE = {
    "provider": "openai", "model": "gpt-4o", "input": 2.5, "output": 10, "cached_input": 1.25,
    "cache_write": 2.5,
}  # fmt: skip


@dataclass(frozen=True)
class BadDocument:
    """A document acme's import refuses. `document` gives its text from the trio once
    `setup` ran (an export of acme, changed, for the rules about what is stored)."""

    id: str
    document: Callable[[Any], str]
    paths: tuple[str, ...]
    setup: Setup = lambda trio: None
    prune: bool = False
    format: str | None = None
    by: Callable[[Any], Principal | None] = lambda trio: None  # None: the operator


def text(value: str) -> Callable[[Any], str]:
    return lambda trio: value


def data(**sections: Any) -> Callable[[Any], str]:
    return lambda trio: json.dumps({"version": 1, **sections})


def exported(change: Callable[[dict[str, Any]], None]) -> Callable[[Any], str]:
    """acme's own document, changed by `change` (in place)."""

    def document(trio: Any) -> str:
        current = config_export(tenant=trio.acme)
        change(current)
        return json.dumps(current)

    return document


def _set(section: str, index: int, **values: Any) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        entry = document[section][index]
        for key, value in values.items():
            *parents, last = key.split(".")
            place = entry
            for parent in parents:
                place = place[parent]
            place[last] = value

    return change


# -- the states the documents meet -----------------------------------------------------------
def secret_holders(trio: Any) -> None:
    """One object of each kind holding a secret, sent to its URL."""
    acme = trio.acme
    make_connection(
        acme, "gw", "openai_compatible", preset="custom", base_url="https://llm.example.com/v1",
        api_key=PLANTED,
    )  # fmt: skip
    make_http_tool(acme, "lookup", "https://api.example.com/lookup", config=BEARER, secret=PLANTED)
    make_agent(acme, "far", kind="remote", remote_url="https://agents.example.com/a",
               remote_token=PLANTED)  # fmt: skip
    make_mcp_connection(acme, "https://mcp.example.com/mcp", name="crm", auth_header=PLANTED)


def credentials_stored_in_urls(trio: Any) -> None:
    """Rows written around validation, as rows stored before the rule may be."""
    acme = trio.acme
    ProviderConnection.objects.create(
        tenant=acme, name="gw", kind="openai_compatible", preset="vllm",
        base_url=f"https://bot:{PLANTED}@llm.example.com/v1",
    )  # fmt: skip
    make_http_tool(
        acme, "legacy", f"https://x.example.com/a?api_key={PLANTED}",
        config={"fixed": {"headers": {"Authorization": PLANTED}}},
    )  # fmt: skip


def dependent_tools(trio: Any) -> None:
    """create_note takes customer_id from find_customer's $.id."""
    output = {"type": "object", "properties": {"id": {"type": "integer"}}}
    make_http_tool(trio.acme, "find_customer", "https://crm.example.com/c", output_schema=output)
    make_http_tool(
        trio.acme, "create_note", "https://crm.example.com/c/{customer_id}/notes", method="POST",
        input_schema={"type": "object", "properties": {"customer_id": {"type": "integer"}},
                      "required": ["customer_id"]},
        config={"arguments": [{"argument": "customer_id", "to": "path"}]},
        requires_approval=True,
        depends_on={"customer_id": {"from": "find_customer", "path": "$.id"}},
    )  # fmt: skip


def a_webhook(trio: Any) -> None:
    support = make_agent(trio.acme, "support")
    trigger_save(
        tenant=trio.acme, by=Principal.for_initiator(trio.acme, trio.alice),
        changes={"name": "issues", "kind": "webhook", "agent": support, "input_template": "Go"},
    )  # fmt: skip


def an_admin_named_dana(trio: Any) -> None:
    make_agent(trio.acme, "support")
    add_member(trio.acme, make_user("dana"), Role.ADMIN)


def as_dana(trio: Any) -> Principal:
    from django.contrib.auth import get_user_model

    return Principal.for_initiator(trio.acme, get_user_model().objects.get(username="dana"))


def globex_objects(trio: Any) -> None:
    make_connection(trio.globex, "main")
    make_agent(trio.globex, "boss")
    ApiKey.objects.create(tenant=trio.globex, name="ci", prefix="corpus12", secret_hash="x" * 64)


def a_writer_without_confirmation(trio: Any) -> None:
    make_http_tool(trio.acme, "post_it", "https://x.example.com/notes", method="POST")


CORPUS: list[BadDocument] = [
    # -- unreadable (tests/agents/test_config_document.py, tests/api/test_config_api.py) ----
    BadDocument("yaml-syntax", text("version: [\n"), ("",)),
    BadDocument("yaml-aliases", text("a: &x 1\nb: *x\n"), ("",)),
    BadDocument("too-large", text("x: " + "y" * 1_000_001), ("",)),
    BadDocument("not-a-mapping", text("- 1\n"), ("",)),
    BadDocument("empty", text(""), ("",), format="json"),
    BadDocument("json-syntax", text("{"), ("",), format="json"),
    # -- the format ------------------------------------------------------------------------
    BadDocument("missing-field", data(agents=[{"slug": "a"}]), ("agents[0].name",)),
    BadDocument("unknown-section", data(tools=[], colour=1), ("colour",)),
    BadDocument("unknown-version", text('{"version": 9}'), ("version",), format="json"),
    BadDocument(
        "unknown-field-and-connection",
        data(
            agents=[
                {"slug": "a", "name": "A", "connection": "nowhere", "colour": "blue"},
                {"slug": "b", "name": "B", "connection": "nowhere"},
            ]
        ),
        ("agents[0].colour",),
    ),
    BadDocument(
        "duplicate-tool",
        data(
            tools=[
                {
                    "name": "c",
                    "kind": "builtin",
                    "description": "Sums.",
                    "config": {"builtin": "calculator"},
                }
            ]
            * 2
        ),
        ("tools[1].name",),
    ),
    # -- references ------------------------------------------------------------------------
    BadDocument(
        "another-tenants-names",
        data(
            agents=[{"slug": "support", "name": "S", "connection": "main"}],
            crews=[{"slug": "desk", "name": "Desk", "members": ["boss"]}],
            quotas=[{**QUOTA, "scope": "api_key", "api_key": "ci"}],
        ),
        ("agents[0].connection", "crews[0].members[0]", "quotas[0].api_key"),
        setup=globex_objects,
    ),
    BadDocument(
        "prune-deletes-a-member",
        data(crews=[{"slug": "solo", "name": "Solo", "members": ["support"]}]),
        ("crews[0].members[0]",),
        setup=lambda trio: make_agent(trio.acme, "support"),
        prune=True,
    ),
    BadDocument(
        "members-agents-keys-unknown",
        data(
            quotas=[
                {**QUOTA, "scope": "member", "member": "charlie"},
                {**QUOTA, "scope": "agent", "agent": "nobody"},
            ],
            triggers=[{**TRIGGER, "agent": None, "crew": "nowhere", "run_as": "charlie"}],
        ),
        ("quotas[0].member", "quotas[1].agent", "triggers[0].crew", "triggers[0].run_as"),
    ),
    BadDocument(
        "knowledge-base-links-a-ghost",
        data(knowledge_bases=[{"slug": "kb", "name": "KB", "agents": ["ghost"]}]),
        ("knowledge_bases[0].agents[0]",),
    ),
    BadDocument(
        "alias-to-a-gone-connection",
        data(model_aliases=[{"name": "chat", "targets": [{"connection": "Gone", "model": "x"}]}]),
        ("model_aliases[0].targets[0].connection",),
    ),
    BadDocument(
        "fallback-to-a-gone-connection",
        data(
            agents=[{"slug": "h", "name": "H", "fallbacks": [{"connection": "No", "model": "x"}]}]
        ),
        ("agents[0].fallbacks[0].connection",),
    ),
    # -- secrets ---------------------------------------------------------------------------
    BadDocument(
        "credentials-in-stored-urls",
        exported(lambda document: None),
        (
            "connections[0].base_url",
            "tools[0].config.url",
            "tools[0].config.fixed.headers.Authorization",
        ),
        setup=credentials_stored_in_urls,
    ),
    BadDocument(
        "bearer-auth-without-its-secret",
        exported(_set("tools", 0, secret=None)),
        ("tools[0].secret",),
        setup=lambda trio: make_http_tool(
            trio.acme, "billing", "https://billing.example.com/x", config=BEARER, secret=PLANTED
        ),
    ),
    BadDocument(
        "a-secret-not-held",
        data(connections=[{"name": "claude", "kind": "anthropic", "secret": "connection:claude"}]),
        ("connections[0].secret",),
    ),
    BadDocument(
        "a-secret-misnamed",
        exported(_set("connections", 0, secret="connection:main")),
        ("connections[0].secret",),
        setup=lambda trio: make_connection(trio.acme, "claude", "anthropic", api_key=PLANTED),
    ),
    BadDocument(
        "a-key-only-the-model-requires",
        data(connections=[{"name": "gpt", "kind": "openai"}]),
        ("connections[0].secret",),
    ),
    # A secret stays with its destination (base/secret_destinations.py): the rule
    # is the models' clean(), which only the apply runs.
    BadDocument(
        "a-tool-secret-moved-to-another-host",
        exported(_set("tools", 0, **{"config.url": "https://evil.test/lookup"})),
        ("tools[0].secret",),
        setup=secret_holders,
    ),
    BadDocument(
        "a-provider-key-moved-to-another-host",
        exported(_set("connections", 0, base_url="https://evil.test/v1")),
        ("connections[0].secret",),
        setup=secret_holders,
    ),
    BadDocument(
        "a-remote-agents-token-moved-to-another-host",
        exported(_set("agents", 0, remote_url="https://evil.test/a")),
        ("agents[0].secret",),
        setup=secret_holders,
    ),
    BadDocument(
        "an-mcp-header-moved-to-another-host",
        exported(_set("mcp_servers", 0, url="https://evil.test/mcp")),
        ("mcp_servers[0].secret",),
        setup=secret_holders,
    ),
    # -- agents ----------------------------------------------------------------------------
    BadDocument(
        "approval-group-missing",
        data(agents=[{"slug": "h", "name": "H", "approval": {"deciders": "group", "group": None}}]),
        ("agents[0].approval.group",),
    ),
    BadDocument(
        "a-model-the-connection-does-not-allow",
        data(
            connections=[
                {
                    "name": "local",
                    "kind": "offline",
                    "allowed_models": ["offline-demo"],
                    "default_model": "offline-demo",
                }
            ],
            agents=[{"slug": "h", "name": "H", "connection": "local", "model": "other"}],
        ),
        ("agents[0].model",),
    ),
    # -- the tenant's policy ---------------------------------------------------------------
    BadDocument(
        "policy-leaves-a-writer-unconfirmed",
        data(policy={"require_confirmation_for_writes": True}),
        ("policy.require_confirmation_for_writes",),
        setup=a_writer_without_confirmation,
    ),
    BadDocument(
        "an-unknown-time-zone",
        data(policy={"time_zone": "Mars/Olympus"}),
        ("policy.time_zone",),
    ),
    BadDocument(
        "a-kept-tools-dependency-broken",
        exported(
            lambda document: document.update(
                tools=[
                    {
                        **document["tools"][1],
                        "output_schema": {
                            "type": "object",
                            "properties": {"uid": {"type": "integer"}},
                        },
                    }
                ]
            )
        ),
        ("tools",),
        setup=dependent_tools,
    ),
    # -- prices, quotas, triggers (tests/agents/test_config_operations.py) ------------------
    BadDocument(
        "an-unknown-price-table",
        data(prices=[{**PRICE, "provider": "acme-ai"}]),
        ("prices[0].provider",),
    ),
    BadDocument("a-quota-twice", data(quotas=[QUOTA, {**QUOTA, "limit": 5}]), ("quotas[1]",)),
    BadDocument(
        "a-bad-cron",
        data(triggers=[{**TRIGGER, "cron": "61 * * * *"}]),
        ("triggers[0].cron",),
        setup=lambda trio: make_agent(trio.acme, "support"),
    ),
    BadDocument(
        "runs-attributed-to-a-higher-role",
        data(triggers=[TRIGGER]),
        ("triggers[0].run_as",),
        setup=an_admin_named_dana,
        by=as_dana,
    ),
    BadDocument(
        "a-trigger-changing-its-kind",
        exported(_set("triggers", 0, kind="schedule", cron="0 9 * * *")),
        ("triggers[0].kind",),
        setup=a_webhook,
    ),
]
