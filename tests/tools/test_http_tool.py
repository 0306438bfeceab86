"""HTTP tools declared in config, against a real local HTTP server (allow-listed), their
circuit state in the real Redis as the platform keeps it (tools/loader.py); the pure
runtime's in-process store is held to the same circuit tests."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from dataclasses import replace

import pytest
from django.conf import settings
from pydantic import ValidationError

from tests.tools.local_server import Reply
from tools.runtime.circuit import CircuitState, MemoryCircuitStore, RedisCircuitStore
from tools.runtime.context import RunContext, StaticSecrets
from tools.runtime.egress import EgressPolicy, GuardedHttpClient
from tools.runtime.http_tool import HttpToolConfig, build_http_tool
from tools.runtime.prepared_request import PreparedRequest
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, ToolCall, ToolFailed

SECRET = "sk-live-5ecr3t-value"
SCHEMA = {
    "type": "object",
    "properties": {
        "item_id": {"type": "integer"},
        "units": {"type": "string"},
        "note": {"type": "string"},
        "trace": {"type": "string"},
    },
    "required": ["item_id"],
}


def redis_store() -> RedisCircuitStore:
    """The platform's store, with keys of its own: no test sees another's circuit."""
    return RedisCircuitStore(settings.REDIS_URL, prefix=f"test-{uuid.uuid4().hex}:")


@pytest.fixture(params=["redis", "memory"])
def circuit_store(request):
    """Each circuit test runs against the platform's store and the pure runtime's."""
    return redis_store() if request.param == "redis" else MemoryCircuitStore()


def make_tool(server, *, config: dict, schema=SCHEMA, store=None, capability=None, **kwargs):
    return build_http_tool(
        name=kwargs.pop("name", "items"),
        description="Items API",
        input_schema=schema,
        config=HttpToolConfig.model_validate({"url": server.url + "/v1/items", **config}),
        egress=GuardedHttpClient(EgressPolicy(allowlist=("127.0.0.1/32",))),
        circuit_store=store or redis_store(),
        circuit_key="t1:items",
        secret_ref="tool:1",
        capability=capability,
        **kwargs,
    )


def context(events=None) -> RunContext:
    return RunContext(
        tenant_id=42,
        user_id=7,
        run_id="run_9",
        correlation_id="corr_1",
        secrets=StaticSecrets({"tool:1": SECRET}),
        events=events,
    )


def call(tool, arguments, ctx=None):
    registry = ToolRegistry([tool])
    return asyncio.run(registry.execute(ToolCall("call_1", tool.name, arguments), ctx or context()))


def test_a_mapped_call_sends_exactly_the_configured_request(local_server):
    local_server.route("POST", "/v1/items/5/notes", Reply(status=201, json={"ok": True}))
    tool = make_tool(
        local_server,
        config={
            "method": "POST",
            "url": local_server.url + "/v1/items/{item_id}/notes",
            "arguments": [
                {"argument": "item_id", "to": "path"},
                {"argument": "units", "to": "query", "name": "u"},
                {"argument": "trace", "to": "header", "name": "X-Trace"},
            ],
            "fixed": {"query": {"v": 2}, "headers": {"X-Client": "agents"}, "body": {"src": "ai"}},
            "context": [
                {"value": "tenant_id", "to": "header", "name": "X-Tenant"},
                {"value": "user_id", "to": "body", "name": "user"},
            ],
            "auth": {"type": "bearer"},
        },
        capability=Capability(effect=Effect.WRITE, idempotent=False),
    )
    result = call(tool, {"item_id": 5, "units": "metric", "trace": "t-1", "note": "hello"})
    assert result.result == {"ok": True}, result.error
    [request] = local_server.requests
    assert request.method == "POST"
    assert request.path == "/v1/items/5/notes?v=2&u=metric"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    assert request.headers["x-trace"] == "t-1"
    assert request.headers["x-client"] == "agents"
    assert request.headers["x-tenant"] == "42"
    assert request.headers["idempotency-key"] == "run_9:call_1"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {"src": "ai", "note": "hello", "user": 7}


def test_unmapped_arguments_go_to_the_query_for_get(local_server):
    local_server.route("GET", "/v1/items", Reply(json=[]))
    call(make_tool(local_server, config={}), {"item_id": 3, "units": "si"})
    [request] = local_server.requests
    assert request.path == "/v1/items?item_id=3&units=si"
    assert "idempotency-key" not in request.headers


def test_the_credential_is_sent_but_never_shown_to_the_model_or_recorded(local_server):
    local_server.route("GET", "/v1/items", Reply(json={"echo": f"you sent Bearer {SECRET}"}))
    events = []
    tool = make_tool(local_server, config={"auth": {"type": "bearer"}})
    definitions = repr(ToolRegistry([tool]).definitions("openai")) + repr(
        ToolRegistry([tool]).definitions("mcp")
    )
    assert SECRET not in definitions and "authorization" not in definitions.lower()
    result = call(tool, {"item_id": 1}, context(lambda kind, data: events.append((kind, data))))
    assert local_server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert result.result == {"echo": "you sent Bearer [redacted]"}
    assert SECRET not in repr(events)


def test_header_and_basic_auth(local_server):
    local_server.route("GET", "/v1/items", Reply(json={}))
    call(
        make_tool(local_server, config={"auth": {"type": "header", "header": "X-Api-Key"}}),
        {"item_id": 1},
    )
    call(
        make_tool(local_server, config={"auth": {"type": "basic", "username": "bot"}}),
        {"item_id": 1},
    )
    first, second = local_server.requests
    assert first.headers["x-api-key"] == SECRET and "authorization" not in first.headers
    assert (
        second.headers["authorization"]
        == "Basic " + base64.b64encode(f"bot:{SECRET}".encode()).decode()
    )


def test_retries_a_503_then_succeeds_honouring_retry_after(local_server):
    local_server.route(
        "GET",
        "/v1/items",
        Reply(status=503, headers={"Retry-After": "0.3"}),
        Reply(json={"items": [1]}),
    )
    started = time.perf_counter()
    result = call(make_tool(local_server, config={}), {"item_id": 1})
    assert result.result == {"items": [1]}
    assert len(local_server.requests) == 2
    assert time.perf_counter() - started >= 0.3


def test_a_401_is_not_retried_and_reads_clearly(local_server):
    local_server.route("GET", "/v1/items", Reply(status=401, json={"error": "bad token"}))
    result = call(make_tool(local_server, config={}), {"item_id": 1})
    assert len(local_server.requests) == 1
    assert result.error.startswith("HTTP 401 from GET 127.0.0.1:")
    assert result.error.endswith('/v1/items: {"error": "bad token"}')


def test_non_idempotent_calls_are_not_retried_on_503_but_are_on_429(local_server):
    config = {"method": "POST", "retry": {"base_delay_s": 0.01}}
    write = Capability(effect=Effect.WRITE, idempotent=False)
    local_server.route("POST", "/v1/items", Reply(status=503), Reply(json={"ok": 1}))
    assert call(make_tool(local_server, config=config, capability=write), {"item_id": 1}).error
    assert len(local_server.requests) == 1
    local_server.route("POST", "/v1/items", Reply(status=429), Reply(json={"ok": 1}))
    result = call(make_tool(local_server, config=config, capability=write), {"item_id": 1})
    assert result.result == {"ok": 1} and len(local_server.requests) == 3


def test_retries_stop_after_max_attempts(local_server):
    local_server.route("GET", "/v1/items", Reply(status=502))
    config = {"retry": {"max_attempts": 3, "base_delay_s": 0.01}}
    result = call(make_tool(local_server, config=config), {"item_id": 1})
    assert result.error.startswith("HTTP 502") and len(local_server.requests) == 3


def test_the_circuit_opens_then_half_opens_and_closes(local_server, circuit_store):
    local_server.route(
        "GET", "/v1/items", Reply(status=500), Reply(status=500), Reply(json={"ok": 1})
    )
    store = circuit_store
    config = {"retry": {"max_attempts": 1}, "circuit": {"failure_threshold": 2, "cooldown_s": 0.3}}
    tool = make_tool(local_server, config=config, store=store)
    assert call(tool, {"item_id": 1}).error.startswith("HTTP 500")
    assert call(tool, {"item_id": 1}).error.startswith("HTTP 500")
    refused = call(tool, {"item_id": 1})
    assert refused.error.startswith("circuit open after 2 consecutive failures")
    assert len(local_server.requests) == 2  # failed fast, no request
    time.sleep(0.35)
    assert call(tool, {"item_id": 1}).result == {"ok": 1}  # the half-open probe
    assert call(tool, {"item_id": 1}).result == {"ok": 1}  # closed again
    assert len(local_server.requests) == 4


def test_a_failed_probe_opens_the_circuit_again(local_server, circuit_store):
    local_server.route("GET", "/v1/items", Reply(status=500))
    config = {"retry": {"max_attempts": 1}, "circuit": {"failure_threshold": 1, "cooldown_s": 0.3}}
    tool = make_tool(local_server, config=config, store=circuit_store)
    assert call(tool, {"item_id": 1}).error.startswith("HTTP 500")
    assert call(tool, {"item_id": 1}).error.startswith("circuit open after 1 consecutive")
    time.sleep(0.35)
    assert call(tool, {"item_id": 1}).error.startswith("HTTP 500")  # the probe fails
    assert call(tool, {"item_id": 1}).error.startswith("circuit open after 2 consecutive")
    assert len(local_server.requests) == 2


def test_a_store_lets_one_probe_through_until_a_failure_or_a_reset(circuit_store):
    async def steps() -> list:
        store, key = circuit_store, "t1:items"
        seen = [await store.read(key)]
        seen += [await store.claim_probe(key, 30), await store.claim_probe(key, 30)]
        await store.add_failure(key, threshold=2, cooldown_s=30)  # a failure frees the probe
        seen += [await store.read(key), await store.claim_probe(key, 30)]
        await store.add_failure(key, threshold=2, cooldown_s=30)
        seen.append(await store.read(key))
        await store.reset(key)
        seen += [await store.read(key), await store.claim_probe(key, 30)]
        return seen

    fresh, first, second, one, freed, opened, reset, after_reset = asyncio.run(steps())
    assert fresh == CircuitState() and (first, second) == (True, False)
    assert one == CircuitState(1, 0.0) and freed is True
    assert opened.failures == 2 and 25 < opened.opened_until - time.time() <= 30
    assert reset == CircuitState() and after_reset is True


def test_circuit_state_is_shared_across_processes_through_redis(local_server, settings):
    import uuid

    local_server.route("GET", "/v1/items", Reply(status=503))
    key = f"test-{uuid.uuid4().hex}"
    config = {"retry": {"max_attempts": 1}, "circuit": {"failure_threshold": 2, "cooldown_s": 30}}
    # two stores = two processes' views of the same Redis
    first = make_tool(
        local_server, config=config, store=RedisCircuitStore(settings.REDIS_URL, prefix=key)
    )
    second = make_tool(
        local_server, config=config, store=RedisCircuitStore(settings.REDIS_URL, prefix=key)
    )
    call(first, {"item_id": 1})
    call(second, {"item_id": 1})
    assert call(first, {"item_id": 1}).error.startswith("circuit open")
    assert call(second, {"item_id": 1}).error.startswith("circuit open")
    assert len(local_server.requests) == 2


def test_model_view_selects_and_renames_fields(local_server):
    payload = {"data": {"items": [{"name": "a", "id": 1}, {"name": "b", "id": 2}], "total": 2}}
    local_server.route("GET", "/v1/items", Reply(json=payload))
    view = {
        "names": "data.items.*.name",
        "count": "data.total",
        "first": "data.items.0.id",
        "gone": "x.y",
    }
    result = call(make_tool(local_server, config={"model_view": view}), {"item_id": 1})
    assert result.result == {"names": ["a", "b"], "count": 2, "first": 1, "gone": None}


def test_output_schema_is_enforced(local_server):
    local_server.route("GET", "/v1/items", Reply(json={"temp": "warm"}))
    schema = {"type": "object", "properties": {"temp": {"type": "number"}}, "required": ["temp"]}
    result = call(make_tool(local_server, config={}, output_schema=schema), {"item_id": 1})
    assert (
        result.error
        == "the response did not match output_schema: temp: expected number, got string"
    )


def test_an_oversized_response_is_refused(local_server):
    local_server.route("GET", "/v1/items", Reply(body=b"x" * 50_000))
    result = call(make_tool(local_server, config={"max_response_bytes": 1000}), {"item_id": 1})
    assert result.error == "response larger than 1000 bytes"


def test_text_responses_come_back_as_text(local_server):
    local_server.route(
        "GET", "/v1/items", Reply(body=b"plain words", headers={"Content-Type": "text/plain"})
    )
    assert call(make_tool(local_server, config={}), {"item_id": 1}).result == "plain words"


def test_a_destination_outside_the_allowlist_is_refused(local_server):
    tool = build_http_tool(
        name="meta",
        description="Cloud metadata",
        input_schema={"type": "object", "properties": {}},
        config=HttpToolConfig(url="http://169.254.169.254/latest/meta-data"),
        egress=GuardedHttpClient(EgressPolicy()),
        circuit_store=redis_store(),
        circuit_key="t1:meta",
    )
    result = call(tool, {})
    assert "169.254.169.254 is not allowed" in result.error


@pytest.mark.parametrize(
    "config,message",
    [
        ({"url": "ftp://x/y"}, "http:// or https://"),
        ({"url": "http://h/{id}"}, "url placeholders without a path mapping: id"),
        ({"url": "http://{host}/x"}, "path only"),
        (
            {"url": "http://h/x", "arguments": [{"argument": "a", "to": "path"}]},
            "without a url placeholder",
        ),
        (
            {"url": "http://h/x", "fixed": {"headers": {"Bad Header": "1"}}},
            "cannot be used as a header",
        ),
        (
            {"url": "http://h/x", "fixed": {"headers": {"Host": "evil"}}},
            "cannot be used as a header",
        ),
        ({"url": "http://h/x", "method": "TRACE"}, "method"),
        ({"url": "http://h/x", "surprise": 1}, "surprise"),
        ({"url": "http://h/x", "timeout_s": 0}, "timeout_s"),
    ],
)
def test_bad_configs_are_refused_with_the_reason(config, message):
    with pytest.raises(ValidationError, match=message):
        HttpToolConfig.model_validate(config)


def test_config_and_schema_must_agree():
    config = HttpToolConfig.model_validate(
        {"url": "http://h/x", "arguments": [{"argument": "missing", "to": "query"}]}
    )
    with pytest.raises(ValueError, match="mapped arguments not in input_schema: missing"):
        config.check_against_schema(SCHEMA)
    config = HttpToolConfig.model_validate(
        {"url": "http://h/x", "context": [{"value": "user_id", "to": "query", "name": "units"}]}
    )
    with pytest.raises(ValueError, match="context values must not be model arguments: units"):
        config.check_against_schema(SCHEMA)


def test_the_model_cannot_add_fields_or_override_fixed_values(local_server):
    local_server.route("POST", "/v1/items", Reply(json={"ok": True}))
    tool = make_tool(
        local_server,
        config={"method": "POST", "fixed": {"body": {"account": "acme-main"}}},
        capability=Capability(effect=Effect.WRITE, idempotent=False),
        schema={
            "type": "object",
            "properties": {"account": {"type": "string"}, "note": {"type": "string"}},
        },
    )
    call(tool, {"account": "attacker", "note": "hi", "tenant_id": "2"})
    assert local_server.requests[0].json() == {"account": "acme-main", "note": "hi"}


def test_dot_segments_in_path_arguments_are_refused(local_server):
    tool = make_tool(
        local_server,
        config={
            "url": local_server.url + "/users/{uid}/items",
            "arguments": [{"argument": "uid", "to": "path"}],
        },
        schema={"type": "object", "properties": {"uid": {"type": "string"}}},
    )
    for bad in ("..", "."):
        assert "cannot be" in call(tool, {"uid": bad}).error
    assert local_server.requests == []


def test_an_echoed_basic_auth_token_is_redacted(local_server):
    token = base64.b64encode(f"bot:{SECRET}".encode()).decode()
    local_server.route("GET", "/v1/items", Reply(json={"seen": f"Basic {token}"}))
    tool = make_tool(local_server, config={"auth": {"type": "basic", "username": "bot"}})
    result = call(tool, {"item_id": 1})
    assert token not in repr(result) and result.result == {"seen": "Basic [redacted]"}


# -- prepared requests: mapped once, shown, then sent exactly -------------------------------
NOTES = {
    "method": "POST",
    "url": "/v1/items/{item_id}/notes",
    "arguments": [
        {"argument": "item_id", "to": "path"},
        {"argument": "units", "to": "query", "name": "u"},
        {"argument": "trace", "to": "header", "name": "X-Trace"},
    ],
    "fixed": {"query": {"v": 2}, "headers": {"X-Client": "agents"}, "body": {"src": "ai"}},
    "context": [{"value": "user_id", "to": "body", "name": "user"}],
    "auth": {"type": "bearer"},
}


def notes_tool(server, **config):
    settings = {**NOTES, **config, "url": server.url + NOTES["url"]}
    return make_tool(
        server, config=settings, capability=Capability(effect=Effect.WRITE, idempotent=False)
    )


def test_the_prepared_request_is_an_exact_value_without_the_credential(local_server):
    tool = notes_tool(local_server)
    registry = ToolRegistry([tool])
    arguments = {"item_id": 5, "units": "métrique", "trace": "t-1", "note": "héllo"}
    prepared = registry.prepare(ToolCall("call_1", "items", arguments), context())
    assert prepared.to_dict() == {
        "method": "POST",
        "url": f"{local_server.url}/v1/items/5/notes?v=2&u=m%C3%A9trique",
        "headers": [
            ["X-Client", "agents"],
            ["X-Trace", "t-1"],
            ["Authorization", "Bearer ***"],
            ["Idempotency-Key", "run_9:call_1"],
            ["Content-Type", "application/json"],
        ],
        "body": '{"src":"ai","note":"héllo","user":7}',
        "credential_header": "Authorization",
    }
    again = registry.prepare(ToolCall("call_1", "items", dict(arguments)), context())
    assert again == prepared  # deterministic
    assert SECRET not in repr(prepared.to_dict())
    assert local_server.requests == []  # preparing sends nothing


def test_sending_a_prepared_request_sends_exactly_its_bytes_plus_the_credential(local_server):
    local_server.route("POST", "/v1/items/5/notes", Reply(status=201, json={"ok": True}))
    tool = notes_tool(local_server)
    registry = ToolRegistry([tool])
    call_ = ToolCall("call_1", "items", {"item_id": 5, "note": "ünïcode ✓"})
    prepared = registry.prepare(call_, context())
    stored = PreparedRequest.from_dict(json.loads(json.dumps(prepared.to_dict())))
    result = asyncio.run(registry.execute(replace(call_, prepared=stored), context()))
    assert result.result == {"ok": True}, result.error
    [received] = local_server.requests
    assert received.method == "POST"
    assert local_server.url + received.path == prepared.url
    assert received.body == prepared.body.encode("utf-8")
    for name, value in prepared.headers:
        expected = f"Bearer {SECRET}" if name == "Authorization" else value
        assert received.headers[name.lower()] == expected


def test_a_direct_call_sends_what_preparing_it_shows(local_server):
    local_server.route("POST", "/v1/items/5/notes", Reply(status=201, json={"ok": True}))
    tool = notes_tool(local_server)
    arguments = {"item_id": 5, "units": "si", "note": "x"}
    prepared = ToolRegistry([tool]).prepare(ToolCall("call_1", "items", arguments), context())
    call(tool, arguments)
    [received] = local_server.requests
    assert local_server.url + received.path == prepared.url
    assert received.body == prepared.body.encode()


def test_basic_auth_is_masked_in_the_prepared_request_and_filled_when_sent(local_server):
    local_server.route("POST", "/v1/items/5/notes", Reply(status=201, json={}))
    tool = notes_tool(local_server, auth={"type": "basic", "username": "bot"})
    registry = ToolRegistry([tool])
    call_ = ToolCall("call_1", "items", {"item_id": 5})
    prepared = registry.prepare(call_, context())
    assert ["Authorization", "Basic ***"] in prepared.to_dict()["headers"]
    asyncio.run(registry.execute(replace(call_, prepared=prepared), context()))
    token = base64.b64encode(f"bot:{SECRET}".encode()).decode()
    assert local_server.requests[0].headers["authorization"] == f"Basic {token}"


def test_a_secret_the_model_put_in_an_argument_is_masked_in_the_request_stored_and_sent(
    local_server,
):
    local_server.route("POST", "/v1/items/5/notes", Reply(status=201, json={}))
    registry = ToolRegistry([notes_tool(local_server)])
    call_ = ToolCall("call_1", "items", {"item_id": 5, "note": f"key {SECRET}"})
    prepared = registry.prepare(call_, context())
    assert SECRET not in repr(prepared) and "key [redacted]" in prepared.body
    asyncio.run(registry.execute(replace(call_, prepared=prepared), context()))
    assert local_server.requests[0].json()["note"] == "key [redacted]"


def test_a_request_that_cannot_be_prepared_says_why(local_server):
    registry = ToolRegistry([notes_tool(local_server)])
    with pytest.raises(ToolFailed, match="invalid arguments"):
        registry.prepare(ToolCall("c", "items", {"item_id": "five"}), context())
    with pytest.raises(ToolFailed, match="control characters"):
        registry.prepare(ToolCall("c", "items", {"item_id": 5, "trace": "a\x00b"}), context())
    with pytest.raises(ToolFailed, match="needs a user_id"):
        registry.prepare(ToolCall("c", "items", {"item_id": 5}), replace(context(), user_id=None))


def test_a_prepared_request_for_another_origin_or_credential_header_is_not_sent(local_server):
    local_server.route("POST", "/v1/items/5/notes", Reply(status=201, json={}))
    registry = ToolRegistry([notes_tool(local_server)])
    call_ = ToolCall("call_1", "items", {"item_id": 5})
    prepared = registry.prepare(call_, context())
    elsewhere = replace(prepared, url=prepared.url.replace("127.0.0.1", "localhost"))
    moved_key = replace(prepared, credential_header="X-Other")
    no_key = replace(prepared, credential_header=None)
    for changed in (elsewhere, moved_key, no_key):
        result = asyncio.run(registry.execute(replace(call_, prepared=changed), context()))
        assert "nothing was sent" in result.error
    assert local_server.requests == []


def test_header_auth_is_masked_under_its_own_name_and_filled_when_sent(local_server):
    local_server.route("POST", "/v1/items/5/notes", Reply(status=201, json={}))
    tool = notes_tool(local_server, auth={"type": "header", "header": "X-Api-Key"})
    registry = ToolRegistry([tool])
    call_ = ToolCall("call_1", "items", {"item_id": 5})
    prepared = registry.prepare(call_, context())
    assert ["X-Api-Key", "***"] in prepared.to_dict()["headers"]
    assert prepared.credential_header == "X-Api-Key"
    asyncio.run(registry.execute(replace(call_, prepared=prepared), context()))
    assert local_server.requests[0].headers["x-api-key"] == SECRET


def test_a_write_is_never_resent_by_a_redirect_but_a_read_follows_one(local_server):
    local_server.route("POST", "/v1/items", Reply(status=307, headers={"location": "/v2/items"}))
    local_server.route("POST", "/v2/items", Reply(status=201, json={"created": True}))
    local_server.route("GET", "/v1/items", Reply(status=302, headers={"location": "/v2/items"}))
    local_server.route("GET", "/v2/items", Reply(json={"items": []}))
    write = make_tool(local_server, config={"method": "POST"})
    result = call(write, {"item_id": 1})
    assert result.error is not None and result.error.startswith("HTTP 307 from POST")
    assert [(r.method, r.path) for r in local_server.requests] == [("POST", "/v1/items")]
    read = make_tool(local_server, config={"method": "GET"})
    assert call(read, {"item_id": 1}).result == {"items": []}
