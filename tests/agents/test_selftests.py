"""Tool self-tests from declared examples (agents/selftests.py): expectations, the runner and
the tool's health, from the tool page, REST, the command and the periodic task; each example
a direct call of whoever asked, through the tool-call step, recorded as a run."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.urls import reverse

from agents.models import Approval, Run
from agents.selftests import UNATTENDED, selftest_tools
from agents.tasks import selftest_all_tenants
from tenancy.services import api_key_create
from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import login, make_http_tool, make_mcp_connection
from tests.fakes.mcp_server import FakeMcpServer
from tests.tools.local_server import LocalServer, Reply
from tools.mcp_connections import mcp_connection_refresh, mcp_connection_save
from tools.models import McpServerConnection, McpStatus, ToolDefinition, ToolHealth
from tools.runtime.expectations import Expectation, ExpectationError, ToolExample, parse_examples
from tools.services import tool_definition_save

ANSWER = {"city": "Paris", "temp_c": 21}


@pytest.mark.fast
@pytest.mark.parametrize(
    ("expect", "value", "error", "fails"),
    [
        ({"succeeds": True}, ANSWER, None, None),
        ({"succeeds": True}, None, "HTTP 500", "failed: HTTP 500"),
        ({"exact": ANSWER}, {"temp_c": 21, "city": "Paris"}, None, None),
        ({"exact": ANSWER}, {"city": "Lyon"}, None, "expected exactly"),
        ({"contains": "Paris"}, ANSWER, None, None),
        ({"contains": "Rome"}, ANSWER, None, "expected it to contain 'Rome'"),
        ({"regex": r'"temp_c": \d+'}, ANSWER, None, None),
        ({"regex": r"^\d+$"}, "42 apples", None, "no match"),
        ({"schema": {"type": "object", "required": ["city"]}}, ANSWER, None, None),
        ({"schema": {"type": "object", "required": ["wind"]}}, ANSWER, None, "does not match"),
    ],
)
def test_expectations(expect, value, error, fails):
    failure = Expectation.parse(expect).failure(value, error)
    assert failure is None if fails is None else fails in failure


@pytest.mark.fast
@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"contains": "a", "exact": 1}, "exactly one"),
        ({"looks_like": 1}, "unknown expectation"),
        ({"regex": r"(a)\1"}, "regex"),  # a backreference: RE2 refuses, nothing backtracks
        ({"schema": {"$ref": "https://example.com/s.json"}}, "schema"),  # never fetched
        ({"succeeds": False}, "succeeds: true"),
    ],
)
def test_bad_expectations_are_refused_with_the_reason(data, says):
    with pytest.raises(ExpectationError, match=says):
        Expectation.parse(data)


@pytest.mark.fast
def test_examples_parse_and_name_the_bad_one():
    [example] = parse_examples([{"arguments": {"q": "x"}, "expect": {"contains": "y"}}])
    assert example == ToolExample({"q": "x"}, Expectation("contains", "y"))
    with pytest.raises(ExpectationError, match=r"\[1\]: unknown fields: expected"):
        parse_examples([{"arguments": {}}, {"arguments": {}, "expected": 1}])


@pytest.fixture
def weather(trio):
    server = LocalServer()
    server.route("GET", "/weather", Reply(json=ANSWER))
    server.route("POST", "/alerts", Reply(status=201, json={"ok": True}))
    make_http_tool(
        trio.acme,
        "weather",
        server.url + "/weather",
        description="Weather in a city.",
        examples=[
            {"name": "Paris", "arguments": {"q": "Paris"}, "expect": {"contains": "Paris"}},
            {"arguments": {"q": "Lyon"}, "expect": {"exact": {"city": "Lyon"}}},
        ],
    )
    make_http_tool(
        trio.acme,
        "alert",
        server.url + "/alerts",
        method="POST",
        description="Send an alert.",
        examples=[{"arguments": {"q": "storm"}}],
    )
    yield server
    server.close()


def test_examples_run_record_health_and_a_write_runs_only_when_safe(
    trio, weather, settings, sample_workflows
):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    healths = {h.tool_name: h for h in selftest_tools(trio.acme)}  # a plug-in's workflow too
    assert {"calculator", "think", "current_time", "compound_interest"} <= set(healths)
    assert all(healths[n].status == "passing" for n in ("calculator", "compound_interest"))
    weather_health = healths["weather"]
    assert weather_health.status == "failing"
    passed, failed = weather_health.results
    assert (passed["name"], passed["status"]) == ("Paris", "passed")
    assert failed["status"] == "failed" and "expected exactly" in failed["detail"]
    assert healths["alert"].status == "skipped"
    assert "safe_to_run" in healths["alert"].results[0]["detail"]
    assert [r.method for r in weather.requests] == ["GET", "GET"]  # nothing written

    tool_definition_save(
        tenant=trio.acme,
        definition=ToolDefinition.objects.get(name="alert"),
        changes={"examples": [{"arguments": {"q": "storm"}, "safe_to_run": True}]},
    )
    [alert] = selftest_tools(trio.acme, ["alert"])
    assert alert.status == "passing" and weather.requests[-1].method == "POST"
    assert ToolHealth.objects.filter(tenant=trio.acme, tool_name="alert").count() == 1


def test_a_tool_that_needs_approval_is_not_run_even_when_safe_nobody_can_approve(
    trio, weather, settings
):
    """The step's approval rule holds for self-tests too: refused (recorded), not parked."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    tool_definition_save(
        tenant=trio.acme,
        definition=ToolDefinition.objects.get(name="alert"),
        changes={
            "requires_approval": True,
            "examples": [{"arguments": {"q": "storm"}, "safe_to_run": True}],
        },
    )

    [alert] = selftest_tools(trio.acme, ["alert"])

    assert alert.status == "skipped"
    [result] = alert.results
    assert (result["status"], result["detail"]) == ("skipped", UNATTENDED)
    assert weather.requests == []  # nothing sent
    refused = Run.objects.get(pk=result["run_id"])
    assert (refused.tool_name, refused.status, refused.error) == ("alert", "failed", UNATTENDED)
    assert not Approval.objects.exists()  # nobody was asked


def test_each_example_is_a_recorded_run_of_who_asked_within_the_tools_rate_limit(
    client, trio, weather, settings
):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    tool_definition_save(
        tenant=trio.acme,
        definition=ToolDefinition.objects.get(name="weather"),
        changes={"rate_limit_per_minute": 1},
    )
    key, secret = api_key_create(tenant=trio.acme, name="ci", scopes=["read", "run"])
    ran = Api(client, secret).post("/tools/weather/selftest")
    assert ran.status_code == 200, ran.content
    paris, lyon = ran.json()["results"]
    assert paris["status"] == "passed" and "limited to 1 calls per minute" in lyon["detail"]
    assert len(weather.requests) == 1  # the limit counts the self-test's calls
    for shown in (paris, lyon):
        run = Run.objects.get(pk=shown["run_id"])
        assert (run.tool_name, run.initiated_by_api_key_id) == ("weather", key.pk)
        assert run.events.get(type="tool.started").payload["via"] == "selftest"
    assert Run.objects.get(pk=lyon["run_id"]).events.filter(type="tool.rate_limited").exists()

    login(client, trio.alice)
    url = reverse("config:tool_selftest", kwargs={"tenant_slug": "acme", "name": "calculator"})
    client.post(url, HTTP_HX_REQUEST="true")
    [by_alice] = ToolHealth.objects.get(tenant=trio.acme, tool_name="calculator").results
    assert Run.objects.get(pk=by_alice["run_id"]).initiated_by_user == trio.alice

    selftest_all_tenants()  # the platform's: nobody's
    [by_nobody] = ToolHealth.objects.get(tenant=trio.acme, tool_name="calculator").results
    run = Run.objects.get(pk=by_nobody["run_id"])
    assert (run.initiated_by_user_id, run.initiated_by_api_key_id) == (None, None)


def test_self_tests_on_the_page_past_the_members_request_budget_run_nothing(client, trio, rates):
    rates("1/min", None)
    login(client, trio.alice)
    url = reverse("config:tool_selftest", kwargs={"tenant_slug": "acme", "name": "calculator"})
    assert client.post(url, HTTP_HX_REQUEST="true").status_code == 200
    ran = Run.objects.filter(tenant=trio.acme).count()
    assert ran >= 1
    block = client.post(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="tool-health"' in block and "Not run: Rate limit reached; retry in" in block
    assert "Passing" in block  # (the last check's results stay shown)
    page = client.post(url, follow=True).content.decode()  # (without htmx: the tool's page)
    assert "Rate limit reached; retry in" in page
    assert Run.objects.filter(tenant=trio.acme).count() == ran


def test_a_key_limited_to_other_tools_may_not_self_test_this_one(client, trio, weather, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    _, secret = api_key_create(
        tenant=trio.acme, name="k", scopes=["read", "run"], allowed_tools=["calculator"]
    )
    api = Api(client, secret)
    assert_error(api.post("/tools/weather/selftest"), 403)
    assert weather.requests == [] and not Run.objects.exists()
    assert not ToolHealth.objects.filter(tool_name="weather").exists()
    assert api.post("/tools/calculator/selftest").json()["status"] == "passing"


def test_examples_are_checked_against_the_input_schema_when_saved(trio):
    definition = make_http_tool(trio.acme, "lookup", "https://api.example.com/lookup")
    for bad, says in (
        ([{"arguments": {"q": 5}}], "[0].arguments"),
        ({"arguments": {}}, "a list of examples"),
        ([{"arguments": {}, "expect": {"regex": "(a)\\1"}}], "regex"),
    ):
        with pytest.raises(ValidationError, match="examples") as caught:
            tool_definition_save(tenant=trio.acme, definition=definition, changes={"examples": bad})
        assert says in str(caught.value)
    assert ToolDefinition.objects.get(pk=definition.pk).examples == []


def test_rest_runs_self_tests_and_shows_health(client, trio, weather, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    api = as_key(client, trio.acme, "read", "run", "config")
    ran = api.post("/tools/weather/selftest")
    assert ran.status_code == 200, ran.content
    assert ran.json()["status"] == "failing" and len(ran.json()["results"]) == 2
    shown = api.get("/tools/weather").json()
    assert shown["health"]["status"] == "failing"
    assert shown["selftests"][0] == {
        "arguments": {"q": "Paris"}, "expect": {"contains": "Paris"}, "name": "Paris"
    }  # fmt: skip
    listed = {t["name"]: t for t in api.get("/tools").json()["results"]}
    assert listed["weather"]["health"]["status"] == "failing"
    assert listed["calculator"]["health"] is None  # never ran
    assert listed["calculator"]["selftests"][0]["expect"] == {"exact": {"result": 12}}

    made = api.post(
        "/tools",
        {"name": "calc2", "kind": "builtin", "config": {"builtin": "calculator"},
         "examples": [{"arguments": {"expression": "2+2"}, "expect": {"exact": {"result": 4}}}]},
    )  # fmt: skip
    assert made.status_code == 201, made.content
    assert api.post("/tools/calc2/selftest").json()["status"] == "passing"
    refused = api.patch("/tools/calc2", {"examples": [{"arguments": {"expression": 2}}]})
    assert "examples" in assert_error(refused, 400)["details"]

    make_http_tool(trio.acme, "plain", "https://api.example.com/plain")
    assert "examples" in assert_error(api.post("/tools/plain/selftest"), 400)["details"]
    assert_error(api.post("/tools/nope/selftest"), 404)
    assert_error(as_key(client, trio.globex, "read", "run").post("/tools/weather/selftest"), 404)
    assert_error(as_key(client, trio.acme, "read").post("/tools/weather/selftest"), 403)


def test_the_tool_page_runs_them_and_the_list_shows_health(client, trio, weather, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    login(client, trio.alice)
    page = client.get(reverse("config:tool_try", kwargs={"tenant_slug": "acme", "name": "weather"}))
    assert "Run the self-tests (2)" in page.content.decode()
    url = reverse("config:tool_selftest", kwargs={"tenant_slug": "acme", "name": "weather"})
    block = client.post(url, HTTP_HX_REQUEST="true").content.decode()
    assert "Failing" in block and "passed</strong> Paris" in block
    listed = client.get(reverse("config:tools", kwargs={"tenant_slug": "acme"})).content.decode()
    assert "Failing" in listed


def test_the_command_and_the_periodic_task(trio, weather, settings, capsys):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    call_command("selftest_tools", "--tenant", "acme", "--tool", "calculator")
    assert "acme calculator: passing" in capsys.readouterr().out
    with pytest.raises(CommandError, match="1 tool"):
        call_command("selftest_tools", "--tenant", "acme", "--tool", "weather")
    with pytest.raises(CommandError, match="No tenant"):
        call_command("selftest_tools", "--tenant", "nope")

    ToolHealth.objects.all().delete()
    # both tenants' built-ins with examples (three each), and acme's two tools
    assert selftest_all_tenants() >= 8
    assert ToolHealth.objects.filter(tenant=trio.globex, tool_name="calculator").exists()
    assert ToolHealth.objects.get(tenant=trio.acme, tool_name="weather").status == "failing"


@pytest.fixture
def mcp_docs(trio, settings):
    """A real MCP server whose remote tools declare self-tests on the connection."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = FakeMcpServer()
    connection = make_mcp_connection(trio.acme, server.url, timeout_s=5)
    assert mcp_connection_refresh(connection).status == McpStatus.OK
    yield connection
    server.close()


def test_mcp_tools_declare_examples_on_their_connection(client, trio, mcp_docs):
    mcp_connection_save(
        tenant=trio.acme,
        connection=mcp_docs,
        changes={
            "tool_examples": {
                "add": [
                    {"name": "sum", "arguments": {"a": 2, "b": 3}, "expect": {"contains": "5"}}
                ],
                "wipe": [{"arguments": {"table": "orders"}}],  # destructive: not safe to run
            }
        },
    )
    healths = {h.tool_name: h for h in selftest_tools(trio.acme, ["docs__add", "docs__wipe"])}
    assert healths["docs__add"].status == "passing"
    assert healths["docs__add"].results[0]["name"] == "sum"
    assert healths["docs__wipe"].status == "skipped"

    api = as_key(client, trio.acme, "read", "run", "config")
    shown = api.get("/tools/docs__add").json()
    assert shown["selftests"][0]["arguments"] == {"a": 2, "b": 3}
    assert api.post("/tools/docs__add/selftest").json()["status"] == "passing"
    login(client, trio.alice)
    page = client.get(
        reverse("config:tool_try", kwargs={"tenant_slug": "acme", "name": "docs__add"})
    )
    assert "Run the self-tests (1)" in page.content.decode()


def test_mcp_examples_are_checked_against_the_listed_schema(client, trio, mcp_docs):
    for bad, says in (
        ({"add": [{"arguments": {"a": "two", "b": 3}}]}, "add[0].arguments"),
        ({"add": {"arguments": {}}}, "add: "),
        (["add"], "remote tool names"),
    ):
        with pytest.raises(ValidationError, match="tool_examples") as caught:
            mcp_connection_save(
                tenant=trio.acme, connection=mcp_docs, changes={"tool_examples": bad}
            )
        assert says in str(caught.value)
    assert McpServerConnection.objects.get(pk=mcp_docs.pk).tool_examples == {}

    api = as_key(client, trio.acme, "read", "config")
    refused = api.patch(
        f"/mcp-connections/{mcp_docs.pk}", {"tool_examples": {"add": [{"arguments": {"a": "x"}}]}}
    )
    assert "tool_examples" in assert_error(refused, 400)["details"]
    ok = api.patch(
        f"/mcp-connections/{mcp_docs.pk}",
        {"tool_examples": {"echo": [{"arguments": {"text": "hi"}, "expect": {"contains": "hi"}}]}},
    )
    assert ok.status_code == 200 and ok.json()["tool_examples"]["echo"][0]["arguments"] == {
        "text": "hi"
    }
