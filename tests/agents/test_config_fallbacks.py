"""An agent's fallbacks in the configuration document (agents/runtime/config/compiler.py):
each refused with its path, and kept through an export and an import."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.runtime.config.compiler import ConfigInvalid, KnownNames, compile_config

CONNECTIONS = [
    {"name": "Main", "kind": "openai", "secret": "connection:Main", "default_model": "gpt-a"},
    {
        "name": "Backup",
        "kind": "openai",
        "secret": "connection:Backup",
        "allowed_models": ["gpt-b"],
        "default_model": "gpt-b",
    },
    {"name": "Bare", "kind": "openai", "secret": "connection:Bare"},
]


def document(*fallbacks: dict[str, Any], **agent: Any) -> dict[str, Any]:
    entry = {"slug": "helper", "name": "Helper", "connection": "Main", "fallbacks": list(fallbacks)}
    return {"version": 1, "connections": CONNECTIONS, "agents": [{**entry, **agent}]}


def problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigInvalid) as caught:
        compile_config(data)
    return [(p.path, p.reason) for p in caught.value.problems]


def test_valid_fallbacks_compile():
    compiled = compile_config(
        document(
            {"connection": "Backup", "model": "gpt-b"},
            {"connection": "Backup"},
            load_balancing="round_robin",
        )
    )
    agent = compiled.document.agents[0]
    assert [f.connection for f in agent.fallbacks] == ["Backup", "Backup"]
    assert agent.load_balancing == "round_robin"


def test_an_unknown_connection_is_refused_at_its_path():
    assert problems(document({"connection": "Nowhere", "model": "x"})) == [
        ("agents[0].fallbacks[0].connection", "unknown connection 'Nowhere'")
    ]


def test_a_connection_outside_the_document_that_the_tenant_keeps_is_known():
    data = document({"connection": "Kept", "model": "x"})
    compile_config(data, known=KnownNames(connections=frozenset({"Kept"})))


def test_a_model_the_connection_does_not_allow_is_refused():
    assert problems(document({"connection": "Backup", "model": "gpt-z"})) == [
        ("agents[0].fallbacks[0].model", "the connection does not allow this model")
    ]


def test_a_fallback_without_a_model_on_a_connection_without_a_default_is_refused():
    assert problems(document({"connection": "Bare"})) == [
        ("agents[0].fallbacks[0].model", "name the model: the connection has no default")
    ]


def test_a_fallback_listed_twice_is_refused():
    pair = {"connection": "Backup", "model": "gpt-b"}
    assert problems(document(pair, pair)) == [
        ("agents[0].fallbacks[1]", "this connection and model are listed twice")
    ]


@pytest.mark.parametrize(
    ("fallback", "path"),
    [
        ({"model": "x"}, "agents[0].fallbacks[0].connection"),
        ({"connection": "Backup", "weight": 2}, "agents[0].fallbacks[0].weight"),
        ({"connection": ""}, "agents[0].fallbacks[0].connection"),
    ],
)
def test_a_malformed_fallback_is_refused_at_its_path(fallback, path):
    assert [p for p, _ in problems(document(fallback))] == [path]


def test_an_unknown_balancing_mode_is_refused():
    assert [p for p, _ in problems(document(load_balancing="random"))] == [
        "agents[0].load_balancing"
    ]


def test_more_than_ten_fallbacks_are_refused():
    many = [{"connection": "Backup", "model": f"m{n}"} for n in range(11)]
    assert [p for p, _ in problems(document(*many))] == ["agents[0].fallbacks"]


# -- model aliases (the gateway's) ---------------------------------------------------------
def alias_document(*aliases: dict[str, Any]) -> dict[str, Any]:
    connections = [
        *CONNECTIONS,
        {
            "name": "Claude",
            "kind": "anthropic",
            "secret": "connection:Claude",
            "default_model": "c",
        },
    ]
    return {"version": 1, "connections": connections, "model_aliases": list(aliases)}


def test_a_valid_alias_compiles():
    compile_config(
        alias_document(
            {"name": "chat", "targets": [{"connection": "Main"}, {"connection": "Backup"}]}
        )
    )


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        (
            {"name": "chat", "targets": [{"connection": "Nowhere", "model": "x"}]},
            ("model_aliases[0].targets[0].connection", "unknown connection 'Nowhere'"),
        ),
        (
            {"name": "chat", "targets": [{"connection": "Main"}, {"connection": "Claude"}]},
            ("model_aliases[0].targets", "Anthropic and OpenAI(-compatible) connections cannot "
             "be mixed: a gateway call is passed through in its own API"),
        ),
        (
            {"name": "chat", "targets": [{"connection": "Backup", "model": "gpt-z"}]},
            ("model_aliases[0].targets[0].model", "the connection does not allow this model"),
        ),
    ],
)  # fmt: skip
def test_bad_aliases_are_refused_at_their_path(alias, expected):
    assert problems(alias_document(alias)) == [expected]


@pytest.mark.parametrize(
    ("alias", "path"),
    [
        ({"name": "chat", "targets": []}, "model_aliases[0].targets"),
        ({"name": "Bad Name", "targets": [{"connection": "Main"}]}, "model_aliases[0].name"),
    ],
)
def test_malformed_aliases_are_refused_at_their_path(alias, path):
    assert [p for p, _ in problems(alias_document(alias))] == [path]


def test_an_alias_listed_twice_is_refused():
    alias = {"name": "chat", "targets": [{"connection": "Main"}]}
    assert problems(alias_document(alias, alias)) == [
        ("model_aliases[1].name", "'chat' appears twice in model_aliases")
    ]


@pytest.mark.django_db
def test_fallbacks_and_aliases_survive_an_export_and_an_import(trio):
    from agents.config_document import config_export, config_import
    from agents.models import Agent
    from providers.models import ModelAlias
    from tests.factories import make_agent, make_connection

    make_connection(trio.acme, "Main", "openai", api_key="k1", default_model="m", is_default=True)
    make_connection(trio.acme, "Backup", "openai", api_key="k2", default_model="b")
    make_agent(trio.acme, "helper", fallbacks=[{"connection": "Backup", "model": ""}])
    ModelAlias.objects.create(
        tenant=trio.acme, name="chat", targets=[{"connection": "Main", "model": "m"}]
    )
    exported = config_export(tenant=trio.acme)
    [agent] = exported["agents"]
    assert agent["fallbacks"] == [{"connection": "Backup", "model": ""}]
    assert exported["model_aliases"] == [
        {"name": "chat", "targets": [{"connection": "Main", "model": "m"}], "load_balancing": ""}
    ]
    agent["load_balancing"] = "round_robin"
    exported["model_aliases"][0]["targets"].append({"connection": "Backup", "model": "b"})
    plan = config_import(tenant=trio.acme, text=json.dumps(exported))
    assert plan.valid and plan.applied, plan.as_dict()
    assert Agent.objects.get(slug="helper").load_balancing == "round_robin"
    assert len(ModelAlias.objects.get(name="chat").targets) == 2
    exported["model_aliases"][0]["targets"] = [{"connection": "Gone", "model": "x"}]
    refused = config_import(tenant=trio.acme, text=json.dumps(exported))
    assert not refused.valid
    assert refused.problems[0].path == "model_aliases[0].targets[0].connection"
