"""`POST /api/v1/tools/import/curl` and `POST /api/v1/tools/try` (the dry call): drafts from a
curl command, tried against a local server that plays the API, never saved, never showing
the secret (agentplatform/api/tool_drafts_api.py, agents/runs/dry_calls.py)."""

from __future__ import annotations

import base64
import json

import pytest

from agents.models import Run, RunEvent
from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import login, make_http_tool, make_tool
from tests.tools.local_server import LocalServer, Reply
from tools.imports.drafts import DRY_CALLS_PER_MINUTE
from tools.models import ToolDefinition

SECRET = "tok-SECRET-4242"


@pytest.fixture
def local_server():
    with LocalServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]  # the local server; nothing else private


def weather_fields(url: str, **config) -> dict:
    return {
        "name": "weather",
        "kind": "http",
        "description": "Today's weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "output_schema": {"type": "object", "required": ["temp_c"]},
        "config": {
            "method": "GET",
            "url": url,
            "arguments": [{"argument": "city", "to": "query"}],
            "auth": {"type": "bearer"},
            "model_view": {"temp": "temp_c"},
            **config,
        },
    }


def assert_no_secret(api: Api, *more: str) -> None:
    for text in [*api.bodies, *more]:
        assert SECRET not in text


# -- the curl import ------------------------------------------------------------------------


def test_a_curl_command_becomes_a_draft_and_only_says_a_secret_was_found(client, trio):
    api = as_key(client, trio.acme)
    command = (
        f"curl -G 'https://api.example.com/weather?units=metric' -d city=Paris "
        f"-H 'Authorization: Bearer {SECRET}'"
    )
    response = api.post("/tools/import/curl", {"command": command, "marks": {"query.city": "city"}})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["secret_found"] is True and body["source"] == "curl"
    assert body["draft"]["config"]["auth"] == {"type": "bearer"}
    assert body["draft"]["config"]["fixed"] == {"query": {"units": "metric"}}
    assert body["draft"]["input_schema"]["properties"]["city"]["type"] == "string"
    assert {"place": "query.units", "value": "metric"} in body["places"]
    assert not ToolDefinition.objects.filter(tenant=trio.acme).exists()  # nothing saved
    assert_no_secret(api)


def test_keys_in_named_headers_and_the_query_never_reach_the_draft(client, trio):
    api = as_key(client, trio.acme)
    command = (
        f"curl -H 'X-RapidAPI-Key: {SECRET}' -H 'X-Request-Id: r-1' "
        f"'https://api.example.com/data/2.5/weather?q=London&appid={SECRET}-2'"
    )
    body = api.post("/tools/import/curl", {"command": command}).json()
    config = body["draft"]["config"]
    assert body["secret_found"] is True
    assert config["auth"] == {"type": "header", "header": "X-RapidAPI-Key"}
    assert config["fixed"] == {"query": {"q": "London"}, "headers": {"X-Request-Id": "r-1"}}
    assert any("'appid'" in note for note in body["notes"])
    saved = api.post("/tools", {**body["draft"], "secret": SECRET})  # the draft saves as it is
    assert saved.status_code == 201, saved.content
    stored = ToolDefinition.objects.get(tenant=trio.acme, name=body["draft"]["name"])
    assert SECRET not in json.dumps(stored.config)
    assert_no_secret(api, api.get(f"/tools/{stored.name}").content.decode())


@pytest.mark.parametrize(
    ("data", "field", "says"),
    [
        ({"command": "curl https://a.example.com; cat /etc/passwd"}, "command", "Shell"),
        ({"command": "curl file:///etc/passwd"}, "command", "http://"),
        ({"command": "curl -K /etc/curlrc https://a.example.com"}, "command", "config file"),
        ({"command": "curl https://a.example.com?x=1", "marks": {"query.y": "y"}},
         "marks.query.y", "no such value"),
        ({"command": "x" * 30_000}, "command", ""),
        ({"marks": {}}, "command", ""),
        ({"command": "curl https://a.example.com", "marks": ["query.x"]}, "marks", ""),
    ],
)  # fmt: skip
def test_bad_commands_and_marks_are_400_with_our_message(client, trio, data, field, says):
    error = assert_error(as_key(client, trio.acme).post("/tools/import/curl", data), 400)
    assert field in error["details"], error
    assert says in json.dumps(error["details"][field])
    assert "Traceback" not in json.dumps(error) and "shlex" not in json.dumps(error)


def test_a_member_without_the_right_to_change_tools_is_refused(client, trio):
    login(client, trio.bob)  # a member of acme, not an admin
    api = Api(client, tenant_header="acme")
    assert_error(api.post("/tools/import/curl", {"command": "curl https://a.example.com"}), 403)
    assert_error(api.post("/tools/try", {"fields": weather_fields("https://a.example.com")}), 403)
    read_only = as_key(client, trio.acme, "read")
    assert_error(
        read_only.post("/tools/import/curl", {"command": "curl https://a.example.com"}), 403
    )


# -- the dry call ----------------------------------------------------------------------------


def test_a_dry_call_shows_the_masked_request_the_answer_the_view_and_the_check(
    client, trio, local_server
):
    local_server.route("GET", "/weather", Reply(json={"temp_c": 21, "city": "Paris"}))
    api = as_key(client, trio.acme)
    response = api.post(
        "/tools/try",
        {"fields": weather_fields(f"{local_server.url}/weather"), "secret": SECRET,
         "arguments": {"city": "Paris"}},
    )  # fmt: skip
    assert response.status_code == 200, response.content
    result = response.json()
    assert result["request"].startswith(f"GET {local_server.url}/weather?city=Paris")
    assert "Authorization: Bearer ***" in result["request"]
    assert result["sent"] is True and result["status"] == 200 and result["error"] is None
    assert json.loads(result["answer"]) == {"temp_c": 21, "city": "Paris"}
    assert result["model_view"] == {"temp": 21}
    assert result["schema_check"] == {"ok": True, "problems": []}
    [sent] = local_server.requests
    assert sent.headers["authorization"] == f"Bearer {SECRET}"  # the credential was sent
    assert not ToolDefinition.objects.filter(tenant=trio.acme).exists()  # and nothing saved
    run = Run.objects.get(pk=result["run_id"], tenant=trio.acme)  # recorded as any call
    assert run.tool_name == "weather"
    events = json.dumps(list(RunEvent.objects.filter(run=run).values("type", "payload")))
    assert "dry call" in events
    assert_no_secret(api, events)


def test_a_failed_schema_check_an_http_error_and_an_echoed_secret_are_shown_masked(
    client, trio, local_server, caplog
):
    local_server.route("GET", "/weather", Reply(json={"city": "Paris", "token": SECRET}))
    local_server.route("GET", "/broken", Reply(status=503, json={"error": f"bad {SECRET}"}))
    api = as_key(client, trio.acme)
    fields = weather_fields(f"{local_server.url}/weather", retry={"max_attempts": 1})
    result = api.post("/tools/try", {"fields": fields, "secret": SECRET,
                                     "arguments": {"city": "Paris"}}).json()  # fmt: skip
    assert result["schema_check"]["ok"] is False
    assert "temp_c" in result["schema_check"]["problems"][0]
    assert "[redacted]" in result["answer"]
    fields = weather_fields(f"{local_server.url}/broken", retry={"max_attempts": 1})
    result = api.post("/tools/try", {"fields": fields, "secret": SECRET,
                                     "arguments": {"city": "Paris"}}).json()  # fmt: skip
    assert result["status"] == 503 and "HTTP 503" in result["error"]
    assert result["model_view"] is None and result["schema_check"] is None
    assert_no_secret(api, caplog.text)


def test_send_false_shows_the_request_and_sends_nothing(client, trio, local_server):
    fields = weather_fields(f"{local_server.url}/weather")
    fields["config"]["method"] = "POST"
    fields["config"]["arguments"] = [{"argument": "city", "to": "body"}]
    result = (
        as_key(client, trio.acme)
        .post(
            "/tools/try",
            {"fields": fields, "secret": SECRET, "arguments": {"city": "Paris"}, "send": False},
        )
        .json()
    )
    assert result["sent"] is False and result["run_id"] is None
    assert result["request"].endswith('{"city":"Paris"}')
    assert local_server.requests == []


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://10.0.0.7/admin",
        "http://[::1]:8080/x",
    ],
)
def test_a_dry_call_to_a_private_or_metadata_address_is_refused_by_the_egress_guard(
    client, trio, url
):
    fields = weather_fields(url, retry={"max_attempts": 1})
    result = as_key(client, trio.acme).post(
        "/tools/try", {"fields": fields, "secret": SECRET, "arguments": {"city": "Paris"}}
    )
    assert result.status_code == 200, result.content
    body = result.json()
    assert body["status"] is None and body["answer"] == ""
    assert "refused" in body["error"] or "not allowed" in body["error"], body["error"]


def test_invalid_fields_are_400_as_a_save_and_invalid_arguments_are_the_calls_error(
    client, trio, local_server
):
    api = as_key(client, trio.acme)
    bad = weather_fields(f"{local_server.url}/weather")
    bad["config"]["url"] = "ftp://example.com/x"
    assert_error(api.post("/tools/try", {"fields": bad, "secret": SECRET}), 400)
    no_secret = weather_fields(f"{local_server.url}/weather")
    error = assert_error(api.post("/tools/try", {"fields": no_secret}), 400)
    assert "secret" in json.dumps(error["details"])
    assert_error(api.post("/tools/try", {"fields": "weather"}), 400)
    assert_error(api.post("/tools/try", {"fields": {**no_secret, "secret": SECRET}}), 400)
    result = api.post(
        "/tools/try", {"fields": no_secret, "secret": SECRET, "arguments": {"town": 1}}
    ).json()
    assert result["sent"] is False and "invalid arguments" in result["error"]
    assert local_server.requests == []


def test_trying_changes_to_a_saved_tool_uses_its_secret_and_another_tenants_is_404(
    client, trio, local_server
):
    local_server.route("GET", "/weather", Reply(json={"temp_c": 3}))
    make_http_tool(
        trio.acme, "weather", f"{local_server.url}/weather", config={"auth": {"type": "bearer"}},
        secret=SECRET,
    )  # fmt: skip
    make_tool(trio.globex, "g_tool")
    api = as_key(client, trio.acme)
    fields = weather_fields(f"{local_server.url}/weather")
    change = {k: fields[k] for k in ("config", "input_schema")} | {"description": "New."}
    result = api.post(
        "/tools/try", {"tool": "weather", "fields": change, "arguments": {"city": "Oslo"}}
    ).json()
    assert result["model_view"] == {"temp": 3}, result
    assert local_server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert ToolDefinition.objects.get(tenant=trio.acme).description == "Call weather."
    assert_error(api.post("/tools/try", {"tool": "g_tool", "fields": {}}), 404)
    assert_no_secret(api)


def test_a_draft_from_curl_saved_calls_the_api_the_command_described(client, trio, local_server):
    local_server.route("GET", "/v1/users/7", Reply(json={"id": 7, "name": "Ada"}))
    api = as_key(client, trio.acme, "read", "write", "config", "run")
    command = f"curl -H 'X-API-Key: {SECRET}' -H 'Accept: application/json' " \
        f"{local_server.url}/v1/users/42"  # fmt: skip
    body = api.post(
        "/tools/import/curl",
        {"command": command, "marks": {"path.42": {"name": "user_id", "type": "integer"}},
         "name": "get_user"},
    ).json()  # fmt: skip
    assert body["secret_found"] is True
    saved = api.post("/tools", {**body["draft"], "secret": SECRET})
    assert saved.status_code == 201, saved.content
    ran = api.post("/tools/get_user/execute", {"arguments": {"user_id": 7}})
    assert ran.status_code == 200, ran.content
    assert ran.json()["error"] is None and ran.json()["result"] == {"id": 7, "name": "Ada"}
    [sent] = local_server.requests
    assert sent.path == "/v1/users/7" and sent.headers["x-api-key"] == SECRET
    assert sent.headers["accept"] == "application/json"
    assert_no_secret(api)


def test_a_dry_call_counts_against_the_tools_rate_limit_and_never_waits_for_approval(
    client, trio, local_server
):
    local_server.route("GET", "/weather", Reply(json={"temp_c": 1}))
    fields = weather_fields(f"{local_server.url}/weather")
    fields.update(rate_limit_per_minute=1, requires_approval=True)
    api = as_key(client, trio.acme)
    try_it = {"fields": fields, "secret": SECRET, "arguments": {"city": "Paris"}}
    first = api.post("/tools/try", try_it).json()
    assert first["sent"] is True and first["status"] == 200  # tried by hand: not parked
    second = api.post("/tools/try", try_it).json()
    assert second["status"] is None and "1 calls per minute" in second["error"], second
    assert len(local_server.requests) == 1


def test_renaming_the_draft_gives_no_fresh_dry_calls_they_are_counted_per_person(
    client, trio, local_server
):
    local_server.route("GET", "/weather", Reply(json={"temp_c": 1}))
    api = as_key(client, trio.acme)

    def try_named(api: Api, name: str) -> dict:
        fields = weather_fields(f"{local_server.url}/weather") | {"name": name}
        return api.post(
            "/tools/try", {"fields": fields, "secret": SECRET, "arguments": {"city": "Oslo"}}
        ).json()

    for i in range(DRY_CALLS_PER_MINUTE):
        assert try_named(api, f"weather_{i}")["status"] == 200
    refused = try_named(api, "weather_renamed")
    assert refused["status"] is None and "per person" in refused["error"], refused
    assert Run.objects.get(pk=refused["run_id"]).status == "failed"  # recorded as refused
    assert len(local_server.requests) == DRY_CALLS_PER_MINUTE
    # Another key of the tenant has a count of its own; the name's count was not used up.
    assert try_named(as_key(client, trio.acme), "weather_renamed")["status"] == 200


def test_an_empty_secret_is_a_try_without_one(client, trio, local_server):
    local_server.route("GET", "/weather", Reply(json={"temp_c": 5}))
    make_http_tool(
        trio.acme, "weather", f"{local_server.url}/weather", config={"auth": {"type": "bearer"}},
        secret=SECRET,
    )  # fmt: skip
    api = as_key(client, trio.acme)
    open_fields = weather_fields(f"{local_server.url}/weather")
    del open_fields["config"]["auth"]
    open_fields["name"] = "open_weather"
    result = api.post(
        "/tools/try", {"fields": open_fields, "secret": "", "arguments": {"city": "Oslo"}}
    )
    assert result.status_code == 200, result.content
    assert result.json()["status"] == 200
    assert "authorization" not in local_server.requests[0].headers
    # The saved tool's stored secret is not used when "" is given: its auth needs one.
    again = {"tool": "weather", "fields": {}, "secret": "", "arguments": {"city": "Oslo"}}
    error = assert_error(api.post("/tools/try", again), 400)
    assert "secret" in error["details"]
    assert len(local_server.requests) == 1
    assert_no_secret(api)


@pytest.mark.parametrize("secret", [SECRET, "s3cret"])  # (under 8 characters: masked whole)
def test_basic_auths_token_echoed_by_the_service_is_masked(client, trio, local_server, secret):
    token = base64.b64encode(f"me:{secret}".encode()).decode()
    local_server.route("GET", "/weather", Reply(json={"temp_c": 1, "seen": f"Basic {token}"}))
    fields = weather_fields(f"{local_server.url}/weather", auth={"type": "basic", "username": "me"})
    api = as_key(client, trio.acme)
    result = api.post(
        "/tools/try", {"fields": fields, "secret": secret, "arguments": {"city": "Oslo"}}
    ).json()
    assert result["status"] == 200 and "[redacted]" in result["answer"], result
    assert local_server.requests[0].headers["authorization"] == f"Basic {token}"
    for text in api.bodies:
        assert token not in text and secret not in text
