"""Tenant tool definitions: validation, the tenant registry, isolation and freshness."""

from __future__ import annotations

import sys

import pytest
from django.core.exceptions import ValidationError
from django.http import Http404

from agents.runs import tool_run
from tests import processes
from tests.conftest import ROOT, subprocess_env
from tests.factories import make_tool
from tests.tools.local_server import Reply
from tools.loader import registry_for_tenant, tenant_tools
from tools.models import ToolDefinition

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def http_definition(tenant, url="http://127.0.0.1:9/search", **fields) -> ToolDefinition:
    values = {
        "tenant": tenant,
        "name": "search",
        "description": "Search the catalogue.",
        "kind": "http",
        "input_schema": SCHEMA,
        "config": {"url": url},
        **fields,
    }
    definition = ToolDefinition(**values)
    definition.full_clean()
    definition.save()
    return definition


def errors_of(**fields) -> dict:
    definition = ToolDefinition(**fields)
    with pytest.raises(ValidationError) as caught:
        definition.full_clean()
    return caught.value.message_dict


def test_invalid_schema_or_config_names_the_field(trio):
    base = {"tenant": trio.acme, "name": "t", "description": "d", "kind": "http"}
    assert "input_schema" in errors_of(
        **base,
        input_schema={"type": "object", "properties": {"q": {"type": "txt"}}},
        config={"url": "http://h/"},
    )
    assert "output_schema" in errors_of(
        **base, input_schema=SCHEMA, output_schema={"type": 5}, config={"url": "http://h/"}
    )
    config_errors = errors_of(**base, input_schema=SCHEMA, config={"url": "http://h/{id}"})
    assert config_errors["config"] == ["url placeholders without a path mapping: id"]
    assert "secret" in errors_of(
        **base, input_schema=SCHEMA, config={"url": "http://h/", "auth": {"type": "bearer"}}
    )
    assert "name" in errors_of(
        **{**base, "name": "has space"}, input_schema=SCHEMA, config={"url": "http://h/"}
    )
    assert "config" in errors_of(
        tenant=trio.acme, name="calc", kind="builtin", config={"builtin": "nope"}
    )
    assert ToolDefinition.objects.count() == 0


def test_names_are_unique_per_tenant_only(trio):
    http_definition(trio.acme)
    http_definition(trio.globex)
    with pytest.raises(ValidationError):
        http_definition(trio.acme)


def test_the_registry_has_builtins_plus_enabled_definitions(trio):
    http_definition(trio.acme)
    http_definition(trio.acme, name="off", enabled=False)
    names = registry_for_tenant(trio.acme).names()
    # The built-ins in their plug-ins' order (by entry point name), then the definitions.
    builtins = ["calculator", "current_time", "llm", "think"]
    assert names == [*builtins, "search"]


def test_one_tenants_definitions_never_appear_in_anothers_registry(trio):
    http_definition(trio.acme, name="acme_only")
    assert "acme_only" in registry_for_tenant(trio.acme).names()
    assert "acme_only" not in registry_for_tenant(trio.globex).names()
    with pytest.raises(Http404):
        tool_run(tenant=trio.globex, name="acme_only", arguments={"q": "x"})


def test_a_definition_can_rename_or_hide_a_builtin(trio):
    make_tool(trio.acme, "calc", description="Company calculator", tags=["finance"])
    make_tool(trio.acme, "think", config={"builtin": "think"}, enabled=False)
    registry = registry_for_tenant(trio.acme)
    assert registry.names() == ["calculator", "current_time", "llm", "calc"]
    assert registry.get("calc").description == "Company calculator"
    assert "finance" in registry.get("calc").tags
    assert tool_run(tenant=trio.acme, name="calc", arguments={"expression": "6*7"}).result == {
        "result": 42
    }
    assert "think" in registry_for_tenant(trio.globex).names()


def test_an_edit_is_seen_at_once(trio):
    definition = http_definition(trio.acme)
    assert registry_for_tenant(trio.acme).get("search").description == "Search the catalogue."
    definition.description = "Search everything."
    definition.save()
    assert registry_for_tenant(trio.acme).get("search").description == "Search everything."
    definition.delete()
    assert not registry_for_tenant(trio.acme).has("search")


def test_the_registry_is_cached_between_calls(trio, django_assert_num_queries):
    http_definition(trio.acme)
    first = registry_for_tenant(trio.acme)
    with django_assert_num_queries(0):
        assert registry_for_tenant(trio.acme) is first


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_an_edit_in_another_process_is_seen_here(trio):
    definition = http_definition(trio.acme)
    assert registry_for_tenant(trio.acme).get("search").description == "Search the catalogue."
    from django.conf import settings

    script = (
        "import django; django.setup()\n"
        "from tools.models import ToolDefinition\n"
        f"d = ToolDefinition.objects.get(pk={definition.pk})\n"
        "d.description = 'Edited elsewhere.'\n"
        "d.save()\n"
    )
    processes.run(
        [sys.executable, "-c", script],
        env=subprocess_env(settings.DATABASES["default"]["NAME"]),
        cwd=ROOT,
        check=True,
        timeout=60,
    )
    assert registry_for_tenant(trio.acme).get("search").description == "Edited elsewhere."


def test_http_tool_secret_stays_encrypted_and_is_used_at_call_time(trio, local_server, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    local_server.route("GET", "/search", Reply(json={"hits": 1}))
    http_definition(
        trio.acme,
        url=local_server.url + "/search",
        config={"url": local_server.url + "/search", "auth": {"type": "bearer"}},
        secret="tok-123456",
    )
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM tools_tooldefinition")
        assert "tok-123456" not in cursor.fetchone()[0]
    result = tool_run(tenant=trio.acme, name="search", arguments={"q": "shoes"})
    assert result.result == {"hits": 1}
    assert local_server.requests[0].headers["authorization"] == "Bearer tok-123456"
    assert local_server.requests[0].path == "/search?q=shoes"
    assert tenant_tools(trio.globex).secrets.redact("tok-123456") == "tok-123456"  # not globex's


def test_egress_is_refused_unless_allow_listed(trio, local_server, settings):
    settings.EGRESS_ALLOWLIST = []
    http_definition(trio.acme, config={"url": local_server.url + "/search"})
    result = tool_run(tenant=trio.acme, name="search", arguments={"q": "x"})
    assert "127.0.0.1 is not allowed" in result.error
    assert local_server.requests == []


def test_capabilities_are_derived_from_the_method_unless_set(trio):
    post = http_definition(trio.acme, name="create", config={"method": "POST", "url": "http://h/x"})
    get = http_definition(trio.acme, name="read", config={"url": "http://h/x"})
    put = http_definition(trio.acme, name="put", config={"method": "PUT", "url": "http://h/x"})
    forced = http_definition(
        trio.acme, name="forced", config={"method": "POST", "url": "http://h/x"}, idempotent=True
    )
    registry = registry_for_tenant(trio.acme)
    assert (
        registry.get("create").capability.effect,
        registry.get("create").capability.idempotent,
    ) == ("write", False)
    assert (registry.get("read").capability.effect, registry.get("read").capability.idempotent) == (
        "read",
        True,
    )
    assert registry.get("put").capability.idempotent is True
    assert registry.get("forced").capability.idempotent is True
    assert {post.effect, get.effect, put.effect, forced.effect} == {""}
