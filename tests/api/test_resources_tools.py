"""REST: the tenant's tool registry, its definitions, and executing a tool."""

from __future__ import annotations

from agentplatform.api.tools_api import HTTP_TOOL_REQUEST
from agents.models import Approval, Run
from base.versions import config_bump
from tests.api.test_resources import as_key, assert_error
from tests.factories import make_tool
from tests.tools.local_server import LocalServer, Reply
from tools.models import ToolDefinition

WEATHER = {
    "name": "weather",
    "kind": "http",
    "description": "Today's weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "config": {"url": "https://api.example.com/weather", "auth": {"type": "bearer"}},
    "secret": "tool-SECRET-789",
    "tags": ["weather"],
}


def by_name(response) -> dict[str, dict]:
    return {tool["name"]: tool for tool in response.json()["results"]}


def test_the_list_is_the_effective_registry_with_builtins(client, trio):
    tools = by_name(as_key(client, trio.acme, "read").get("/tools"))
    assert tools["calculator"]["kind"] == "builtin" and tools["calculator"]["plugin"] is None
    assert tools["calculator"]["definition"] is None
    assert tools["calculator"]["capability"]["effect"] == "none"
    assert tools["calculator"]["input_schema"]["required"] == ["expression"]
    assert set(tools) == {"calculator", "current_time", "llm", "think"}  # no plug-in's


def test_a_plugins_tools_show_as_that_plugins(client, trio, sample_workflows, monkeypatch):
    """Recorded where they are registered: an installed package's built-in tools (the sample
    workflows) and its tenant tool source's (tests/data/plugins: greetings)."""
    from tests.agents.test_plugins import INSTALLED
    from tools import tool_sources
    from tools.apps import load_tenant_tool_sources

    monkeypatch.syspath_prepend(str(INSTALLED))
    monkeypatch.setattr(tool_sources, "SOURCES", list(tool_sources.SOURCES))
    monkeypatch.setattr(tool_sources, "SOURCE_ORIGINS", dict(tool_sources.SOURCE_ORIGINS))
    load_tenant_tool_sources()  # as at the next start
    config_bump(trio.acme.pk)
    api = as_key(client, trio.acme, "read")
    plugged = by_name(api.get("/tools", {"kind": "plugin"}))
    assert {name: tool["plugin"] for name, tool in plugged.items()} == {
        "compound_interest": {"name": "compound_interest", "package": "sample-workflows"},
        "greet": {"name": "greetings", "package": "sample-agent-kind"},
    }
    assert "workflow" in plugged["compound_interest"]["tags"]  # what it is: a tag says
    one = api.get("/tools/compound_interest").json()
    assert (one["kind"], one["plugin"]["package"]) == ("plugin", "sample-workflows")
    assert by_name(api.get("/tools", {"kind": "builtin"})).keys() == {
        "calculator", "current_time", "llm", "think"
    }  # fmt: skip
    config_bump(trio.acme.pk)


def test_define_an_http_tool_with_a_write_only_secret(client, trio):
    api = as_key(client, trio.acme)
    created = api.post("/tools", WEATHER)
    assert created.status_code == 201, created.content
    tool = created.json()
    assert tool["kind"] == "http" and tool["enabled"] is True
    assert tool["definition"]["has_secret"] is True
    assert tool["capability"] == {
        "effect": "read",
        "idempotent": True,
        "requires_approval": False,
        "timeout_s": 30.0,
        "rate_limit_per_minute": None,
    }
    assert by_name(api.get("/tools", {"kind": "http"})).keys() == {"weather"}
    assert by_name(api.get("/tools", {"tag": "weather"})).keys() == {"weather"}
    assert api.get("/tools/weather").json()["definition"]["config"] == WEATHER["config"]

    patched = api.patch("/tools/weather", {"description": "Weather now."})
    assert patched.status_code == 200 and patched.json()["description"] == "Weather now."
    assert ToolDefinition.objects.get(name="weather").secret == "tool-SECRET-789"  # kept
    no_secret = api.patch("/tools/weather", {"secret": None})
    assert "secret" in assert_error(no_secret, 400)["details"]  # bearer auth needs one

    assert api.delete("/tools/weather").status_code == 204
    assert_error(api.get("/tools/weather"), 404)
    assert not any("tool-SECRET-789" in body for body in api.bodies)


def test_the_documented_example_is_accepted(client, trio):
    created = as_key(client, trio.acme).post("/tools", HTTP_TOOL_REQUEST)
    assert created.status_code == 201, created.content


def test_definition_validation_names_the_field(client, trio):
    api = as_key(client, trio.acme)
    bad = api.post("/tools", {**WEATHER, "config": {"url": "ftp://x"}})
    assert "config" in assert_error(bad, 400)["details"]
    bad = api.post("/tools", {**WEATHER, "input_schema": {"type": "string"}})
    assert "input_schema" in assert_error(bad, 400)["details"]
    bad = api.post("/tools", {**WEATHER, "name": "has space"})
    assert "name" in assert_error(bad, 400)["details"]
    assert api.post("/tools", WEATHER).status_code == 201
    assert_error(api.post("/tools", WEATHER), 400)  # the name is taken


def test_a_disabled_definition_hides_the_builtin_until_deleted(client, trio):
    api = as_key(client, trio.acme)
    hidden = api.post(
        "/tools",
        {"name": "think", "kind": "builtin", "config": {"builtin": "think"}, "enabled": False},
    )
    assert hidden.status_code == 201, hidden.content
    assert hidden.json()["enabled"] is False
    assert "think" not in by_name(api.get("/tools"))
    assert by_name(api.get("/tools", {"enabled": "false"})).keys() == {"think"}
    assert api.get("/tools/think").json()["enabled"] is False
    runner = as_key(client, trio.acme, "run")
    assert_error(runner.post("/tools/think/execute", {"arguments": {"thought": "x"}}), 404)
    assert api.delete("/tools/think").status_code == 204
    assert by_name(api.get("/tools"))["think"]["definition"] is None


def test_builtins_without_a_definition_cannot_be_changed_or_deleted(client, trio):
    api = as_key(client, trio.acme)
    assert_error(api.patch("/tools/calculator", {"description": "x"}), 404)
    assert_error(api.delete("/tools/calculator"), 404)


def test_execute_a_tool_needs_the_run_scope(client, trio):
    body = {"arguments": {"expression": "6 * 7"}}
    assert_error(
        as_key(client, trio.acme, "read", "write").post("/tools/calculator/execute", body), 403
    )
    runner = as_key(client, trio.acme, "run")
    response = runner.post("/tools/calculator/execute", body)
    assert response.status_code == 200, response.content
    result = response.json()
    assert result["result"] == {"result": 42} and result["error"] is None
    assert result["name"] == "calculator" and result["call_id"].startswith("call_")
    assert result["latency_ms"] >= 0
    assert result["status"] == "succeeded"
    assert Run.objects.get(pk=result["run_id"]).tool_name == "calculator"


def test_execute_reports_tool_trouble_in_error_and_bad_input_as_400(client, trio):
    runner = as_key(client, trio.acme, "run")
    invalid = runner.post("/tools/calculator/execute", {"arguments": {"expression": 5}})
    assert invalid.status_code == 200 and invalid.json()["error"]
    failing = runner.post("/tools/calculator/execute", {"arguments": {"expression": "1/0"}})
    assert failing.status_code == 200 and failing.json()["error"]
    assert_error(runner.post("/tools/calculator/execute", {"arguments": [1]}), 400)
    assert_error(runner.post("/tools/calculator/execute", {}), 400)
    assert_error(runner.post("/tools/nope/execute", {"arguments": {}}), 404)


CALC = {"name": "calc", "kind": "builtin", "config": {"builtin": "calculator"}}


def test_a_rate_limit_is_set_shown_and_cleared(client, trio):
    api = as_key(client, trio.acme)
    created = api.post("/tools", {**CALC, "rate_limit_per_minute": 30})
    assert created.status_code == 201, created.content
    assert created.json()["capability"]["rate_limit_per_minute"] == 30
    assert ToolDefinition.objects.get(name="calc").rate_limit_per_minute == 30
    cleared = api.patch("/tools/calc", {"rate_limit_per_minute": None})
    assert cleared.json()["capability"]["rate_limit_per_minute"] is None
    assert by_name(api.get("/tools"))["calculator"]["capability"]["rate_limit_per_minute"] is None


def test_a_bad_rate_limit_is_a_400_naming_the_field_and_changes_nothing(client, trio):
    api = as_key(client, trio.acme)
    for bad in (0, -5, 100_001, 10**30, 1.5, "many", True, [3]):
        refused = api.post("/tools", {**CALC, "rate_limit_per_minute": bad})
        assert "rate_limit_per_minute" in assert_error(refused, 400)["details"], bad
    assert not ToolDefinition.objects.exists()
    api.post("/tools", {**CALC, "rate_limit_per_minute": 5})
    assert_error(api.patch("/tools/calc", {"rate_limit_per_minute": 0}), 400)
    assert ToolDefinition.objects.get(name="calc").rate_limit_per_minute == 5


def test_a_limit_stored_past_validation_is_listed_as_stored_not_a_500(client, trio):
    api = as_key(client, trio.acme)
    api.post("/tools", {**CALC, "rate_limit_per_minute": 5})
    ToolDefinition.objects.filter(name="calc").update(rate_limit_per_minute=0)
    config_bump(trio.acme.pk)
    listed = api.get("/tools", {"enabled": "false"})  # (the registry skips such a row)
    assert listed.status_code == 200
    shown = api.get("/tools/calc")
    assert shown.status_code == 200 and shown.json()["capability"]["rate_limit_per_minute"] == 0
    assert "calc" not in by_name(api.get("/tools"))


def test_execute_over_the_rate_limit_is_a_failed_run_that_says_when_to_retry(client, trio):
    as_key(client, trio.acme).post("/tools", {**CALC, "rate_limit_per_minute": 2})
    runner = as_key(client, trio.acme, "run")
    body = {"arguments": {"expression": "6 * 7"}}
    first, second, third = (runner.post("/tools/calc/execute", body) for _ in range(3))
    assert first.json()["status"] == second.json()["status"] == "succeeded"
    refused = third.json()
    assert third.status_code == 200 and refused["status"] == "failed"
    assert refused["error"].startswith(
        "tool calc is limited to 2 calls per minute for this tenant; try again in "
    )
    event = Run.objects.get(pk=refused["run_id"]).events.get(type="tool.rate_limited")
    assert event.payload["limit"] == 2 and 0 < event.payload["retry_after_s"] <= 60
    # globex's calc, of the same name, counts on its own.
    as_key(client, trio.globex).post("/tools", {**CALC, "rate_limit_per_minute": 2})
    theirs = as_key(client, trio.globex, "run").post("/tools/calc/execute", body)
    assert theirs.json()["status"] == "succeeded"


def test_other_tenants_tools_answer_404(client, trio):
    as_key(client, trio.globex).post("/tools", {**WEATHER, "name": "globex_weather"})
    api = as_key(client, trio.acme, "read", "config", "run")
    assert "globex_weather" not in by_name(api.get("/tools"))
    assert_error(api.get("/tools/globex_weather"), 404)
    assert_error(api.patch("/tools/globex_weather", {"description": "x"}), 404)
    assert_error(api.delete("/tools/globex_weather"), 404)
    assert_error(api.post("/tools/globex_weather/execute", {"arguments": {"city": "x"}}), 404)
    assert ToolDefinition.objects.get(name="globex_weather").description == WEATHER["description"]


def test_an_approval_gated_tool_is_not_executed_but_parked(client, trio):
    make_tool(trio.acme, "gated_calc", requires_approval=True)
    response = as_key(client, trio.acme, "run").post(
        "/tools/gated_calc/execute", {"arguments": {"expression": "6 * 7"}}
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["status"], body["result"]) == ("awaiting_approval", None)
    run = Run.objects.get(pk=body["run_id"])
    assert run.status == "awaiting_approval" and run.output == ""
    approval = Approval.objects.get(run=run)
    assert f"/api/v1/runs/{run.pk}/approvals/{approval.pk}" in body["decide_at"]


def test_schemas_reading_a_file_or_a_url_are_refused_and_read_nothing(client, trio, tmp_path):
    secrets = tmp_path / "local-secrets.json"
    secrets.write_text('{"SECRET_KEY": "file-SECRET-123"}')
    with LocalServer() as server:
        server.route("GET", "/schema.json", Reply(json={"type": "string"}))
        api = as_key(client, trio.acme, "read", "config", "run")
        for ref in [f"file://{secrets}#/nope", f"{server.url}/schema.json"]:
            schema = {"type": "object", "properties": {"city": {"$ref": ref}}}
            refused = api.post("/tools", {**WEATHER, "input_schema": schema})
            assert "is not allowed" in assert_error(refused, 400)["details"]["input_schema"][0]
        assert not ToolDefinition.objects.exists()

        # Planted past validation: the tool is skipped, nothing is read, nothing is quoted.
        config = {"url": server.url, "auth": {"type": "bearer"}}
        assert api.post("/tools", {**WEATHER, "config": config}).status_code == 201
        for ref in [f"file://{secrets}#/nope", f"{server.url}/schema.json"]:
            planted = {"type": "object", "properties": {"city": {"$ref": ref}}}
            ToolDefinition.objects.filter(name="weather").update(input_schema=planted)
            config_bump(trio.acme.pk)  # update() sends no signal
            called = api.post("/tools/weather/execute", {"arguments": {"city": "Paris"}})
            assert_error(called, 404)
            assert api.get("/tools").status_code == 200
        assert server.requests == []
    assert not any("file-SECRET-123" in body for body in api.bodies)


def test_a_catastrophic_pattern_is_accepted_and_runs_in_linear_time(client, trio):
    schema = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^(a+)+$"}}}
    api = as_key(client, trio.acme, "read", "config", "run")
    assert api.post("/tools", {**WEATHER, "input_schema": schema}).status_code == 201
    called = api.post("/tools/weather/execute", {"arguments": {"city": "a" * 50_000 + "!"}})
    assert called.status_code == 200
    assert called.json()["error"] == "invalid arguments: city: must match '^(a+)+$'"
    lookahead = {"type": "object", "properties": {"city": {"type": "string", "pattern": "(?=x)"}}}
    refused = api.post("/tools", {**WEATHER, "name": "w2", "input_schema": lookahead})
    assert "not supported" in assert_error(refused, 400)["details"]["input_schema"][0]


def test_inputs_from_other_tools_are_set_over_rest_and_checked_as_a_graph(client, trio):
    api = as_key(client, trio.acme)
    finder = {
        **WEATHER,
        "name": "find_city",
        "output_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    assert api.post("/tools", finder).status_code == 201
    dependent = {**WEATHER, "depends_on": {"city": {"from": "find_city", "path": "$.city"}}}
    created = api.post("/tools", dependent)
    assert created.status_code == 201, created.content
    assert ToolDefinition.objects.get(name="weather").depends_on == dependent["depends_on"]
    assert api.get("/tools/weather").json()["definition"]["depends_on"] == dependent["depends_on"]

    wrong = {"city": {"from": "find_city", "path": "$.town"}}
    refused = api.patch("/tools/weather", {"depends_on": wrong})
    assert "no field at $.town" in str(assert_error(refused, 400)["details"]["depends_on"])
    cycle = {"city": {"from": "weather", "path": "$.city"}}
    refused = api.patch("/tools/find_city", {"depends_on": cycle})
    assert "dependency cycle" in str(assert_error(refused, 400)["details"])
    assert ToolDefinition.objects.get(name="weather").depends_on == dependent["depends_on"]


def test_a_reference_argument_needs_a_tool_that_gives_that_kind(client, trio):
    api = as_key(client, trio.acme)
    taker = {
        **WEATHER,
        "name": "hold",
        "secret": None,
        "config": {
            "url": "https://api.example.com/holds",
            "method": "POST",
            "arguments": [{"argument": "city", "to": "body", "reference": "slot"}],
        },
    }
    refused = api.post("/tools", taker)
    assert "no tool's result gives slot references" in str(assert_error(refused, 400)["details"])
    giver = {**WEATHER, "name": "slots", "secret": None}
    giver["config"] = {"url": "https://api.example.com/slots", "references": {"*.id": "slot"}}
    assert api.post("/tools", giver).status_code == 201
    assert api.post("/tools", taker).status_code == 201
