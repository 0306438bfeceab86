"""Tool definitions in the tenant-scoped admin: validation in place, write-only secrets,
the test page, built-ins listed read-only."""

from __future__ import annotations

import json

from agents.models import Run
from tests.factories import login, make_tool
from tests.tools.local_server import Reply
from tools.models import ToolDefinition

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def form(**overrides) -> dict:
    data = {
        "name": "search",
        "kind": "http",
        "description": "Search the catalogue.",
        "input_schema": json.dumps(SCHEMA),
        "output_schema": "null",
        "config": json.dumps({"url": "http://127.0.0.1:9/search"}),
        "secret": "",
        "tags": "catalogue",
        "effect": "read",
        "idempotent": "true",
        "timeout_s": "30",
        "enabled": "on",
    }
    data.update(overrides)
    return data


def test_invalid_json_schema_and_config_are_shown_in_place_and_nothing_is_saved(client, trio):
    login(client, trio.alice)
    bad_json = client.post("/admin/tools/tooldefinition/add/", form(input_schema="{not json"))
    assert bad_json.status_code == 200 and "Enter a valid JSON" in bad_json.content.decode()
    bad_schema = client.post(
        "/admin/tools/tooldefinition/add/",
        form(input_schema=json.dumps({"type": "object", "properties": {"q": {"type": "txt"}}})),
    )
    assert (
        "input_schema is not valid JSON Schema at properties/q/type" in bad_schema.content.decode()
    )
    bad_config = client.post(
        "/admin/tools/tooldefinition/add/", form(config=json.dumps({"url": "gopher://x"}))
    )
    assert "must be an http:// or https:// URL" in bad_config.content.decode()
    assert ToolDefinition.objects.count() == 0


def test_a_valid_definition_is_saved_in_the_admins_tenant(client, trio):
    response = login(client, trio.alice).post("/admin/tools/tooldefinition/add/", form())
    assert response.status_code == 302
    definition = ToolDefinition.objects.get()
    assert (definition.tenant, definition.tags, definition.version) == (trio.acme, ["catalogue"], 1)


def test_a_rate_limit_is_validated_in_place_and_saved(client, trio):
    login(client, trio.alice)
    for bad, message in [
        ("0", "calls per minute from 1 to 100,000"),
        ("-3", "calls per minute from 1 to 100,000"),
        ("often", "Enter a whole number."),
    ]:
        refused = client.post("/admin/tools/tooldefinition/add/", form(rate_limit_per_minute=bad))
        assert refused.status_code == 200 and message in refused.content.decode(), bad
    assert not ToolDefinition.objects.exists()
    saved = client.post("/admin/tools/tooldefinition/add/", form(rate_limit_per_minute="12"))
    assert saved.status_code == 302
    assert ToolDefinition.objects.get().rate_limit_per_minute == 12


def test_the_test_page_honours_the_rate_limit(client, trio):
    make_tool(trio.acme, "calc", rate_limit_per_minute=1)
    login(client, trio.alice)
    url = f"/admin/tools/tooldefinition/test/{trio.acme.pk}/calc/"
    assert "at most 1 calls a minute" in client.get(url).content.decode()
    first = client.post(url, {"arguments": '{"expression": "6*7"}'}).content.decode()
    assert 'id="tool-result"' in first
    second = client.post(url, {"arguments": '{"expression": "6*7"}'}).content.decode()
    assert 'id="tool-error"' in second
    assert "tool calc is limited to 1 calls per minute for this tenant" in second


def test_the_test_page_past_the_admins_request_budget_runs_nothing(client, trio, rates):
    rates("1/min", None)
    make_tool(trio.acme, "calc")
    login(client, trio.alice)
    url = f"/admin/tools/tooldefinition/test/{trio.acme.pk}/calc/"
    first = client.post(url, {"arguments": '{"expression": "6*7"}'})
    assert first.status_code == 200 and 'id="tool-result"' in first.content.decode()
    refused = client.post(url, {"arguments": '{"expression": "6*7"}'})
    page = refused.content.decode()
    assert refused.status_code == 429 and "Rate limit reached; retry in" in page
    assert 'id="tool-result"' not in page
    assert Run.objects.filter(tenant=trio.acme).count() == 1


def test_the_secret_is_write_only(client, trio):
    login(client, trio.alice)
    config = json.dumps({"url": "http://127.0.0.1:9/s", "auth": {"type": "bearer"}})
    missing = client.post("/admin/tools/tooldefinition/add/", form(config=config))
    assert "bearer auth needs a secret" in missing.content.decode()
    client.post("/admin/tools/tooldefinition/add/", form(config=config, secret="tok-SECRET-1"))
    definition = ToolDefinition.objects.get()
    page = client.get(f"/admin/tools/tooldefinition/{definition.pk}/change/").content.decode()
    assert "tok-SECRET-1" not in page
    client.post(
        f"/admin/tools/tooldefinition/{definition.pk}/change/",
        form(config=config, description="Renamed."),
    )
    definition.refresh_from_db()
    assert definition.description == "Renamed." and definition.secret == "tok-SECRET-1"


def test_the_test_page_executes_through_the_registry(client, trio, local_server, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    local_server.route("GET", "/search", Reply(json={"hits": ["boots"]}))
    login(client, trio.alice).post(
        "/admin/tools/tooldefinition/add/",
        form(config=json.dumps({"url": local_server.url + "/search"})),
    )
    url = f"/admin/tools/tooldefinition/test/{trio.acme.pk}/search/"
    page = client.get(url)
    assert page.status_code == 200 and "Search the catalogue." in page.content.decode()
    result = client.post(url, {"arguments": '{"q": "boots"}'}).content.decode()
    assert 'id="tool-result"' in result and "boots" in result and " ms)" in result
    assert local_server.requests[0].path == "/search?q=boots"
    invalid = client.post(url, {"arguments": '{"q": 5}'}).content.decode()
    assert "invalid arguments: q: expected string, got integer" in invalid
    broken = client.post(url, {"arguments": "{oops"}).content.decode()
    assert "Arguments are not valid JSON" in broken


def test_builtins_are_listed_and_testable(client, trio):
    login(client, trio.alice)
    page = client.get("/admin/tools/tooldefinition/builtins/").content.decode()
    for name in ("calculator", "think", "current_time"):
        assert name in page
    assert (
        "/admin/tools/tooldefinition/builtins/"
        in client.get("/admin/tools/tooldefinition/").content.decode()
    )
    url = f"/admin/tools/tooldefinition/test/{trio.acme.pk}/calculator/"
    result = client.post(url, {"arguments": '{"expression": "6*7"}'}).content.decode()
    assert 'id="tool-result"' in result and "&quot;result&quot;: 42" in result


def test_an_approval_gated_tool_tested_in_the_admin_waits_for_a_decision(client, trio, transfer):
    login(client, trio.alice)
    url = f"/admin/tools/tooldefinition/test/{trio.acme.pk}/transfer/"
    page = client.get(url, {"arguments": '{"amount": 5}'})  # GET only shows the form
    assert page.status_code == 200 and not Run.objects.exists()
    body = client.post(url, {"arguments": '{"amount": 5, "to": "bob"}'}).content.decode()
    assert "Approval pending" in body and "/admin/agents/approval/" in body
    assert transfer.requests == []  # nothing reached the bank
    run = Run.objects.get(tenant=trio.acme, tool_name="transfer")
    assert (run.status, run.initiated_by_user) == ("awaiting_approval", trio.alice)
    assert run.events.get(seq=1).payload["via"] == "admin"
    approval = run.approvals.get()
    assert approval.status == "pending" and approval.arguments == {"amount": 5, "to": "bob"}
    assert f"/admin/agents/approval/{approval.pk}/change/" in body


def test_a_plain_tool_tested_in_the_admin_is_a_recorded_run(client, trio):
    login(client, trio.alice)
    url = f"/admin/tools/tooldefinition/test/{trio.acme.pk}/calculator/"
    body = client.post(url, {"arguments": '{"expression": "6*7"}'}).content.decode()
    run = Run.objects.get(tenant=trio.acme, tool_name="calculator")
    assert (run.status, run.initiated_by_user) == ("succeeded", trio.alice)
    assert run.events.get(seq=1).payload["via"] == "admin"
    assert f"/admin/agents/run/{run.pk}/change/" in body


def test_another_tenants_tools_and_test_page_are_404(client, trio):
    theirs = make_tool(trio.globex, "globex_tool", config={"builtin": "think"})
    login(client, trio.alice)
    assert client.get(f"/admin/tools/tooldefinition/{theirs.pk}/change/").status_code == 404
    assert (
        client.get(f"/admin/tools/tooldefinition/test/{trio.globex.pk}/think/").status_code == 404
    )
    assert (
        client.get(f"/admin/tools/tooldefinition/test/{trio.acme.pk}/globex_tool/").status_code
        == 404
    )
    assert "globex_tool" not in client.get("/admin/tools/tooldefinition/").content.decode()


def test_members_cannot_reach_tool_admin(client, trio):
    trio.bob.is_staff = True
    trio.bob.save()
    login(client, trio.bob)
    response = client.get(f"/admin/tools/tooldefinition/test/{trio.acme.pk}/calculator/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
