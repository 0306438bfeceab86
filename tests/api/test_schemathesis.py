"""Property-based conformance of the REST API to its own OpenAPI schema (schemathesis).

The schema at `/api/schema/` is loaded through the WSGI app and must be a valid OpenAPI 3
document. Then every operation under `/api/v1/` and of the `/v1` faces (`/v1/models`,
`/v1/models/{model_id}`, `/v1/chat/completions`, `/v1/responses`, `/v1/embeddings`,
`/v1/messages`, `/v1/messages/count_tokens`) is exercised with a
bounded, deterministic set of generated requests (examples, coverage and fuzzing phases; no
stateful phase; `max-examples` per operation; fixed seed and derandomized Hypothesis) as an
admin-scoped tenant API key. Each response must:

- not be a server error (no 5xx for any input);
- use a documented status code, content type and headers;
- match the documented body schema (including the `{"error": {...}}` error responses).

Operations whose path has an identifier are also called with the id of a seeded object
(an agent, a crew, a tool definition, a provider connection, a conversation, a fact, a
spare API key and a member), so the detail/update routes answer something besides 404.
Each generated case's writes are rolled back after it, so every case meets the seed as
made. The schema is loaded when the tests run (a lazy schema: each operation is a subtest
of its schema's test), not when the module is collected.

A chat completion or a message starts a real run (created in the test's transaction), but
no worker executes it here: the run's progress (`follow_run` of `chat_completions` and
`messages`) is replaced by a canned answer, so both the JSON and the streamed answer are
produced without a provider. The real execution is covered by
tests/api/test_openai_compat.py, tests/api/test_openai_schema.py and
tests/api/test_anthropic_messages.py. Embeddings are computed by the platform's `static`
model (its example), a connection's by none (the seeded connection's address is closed).

Skipped because they start real work, stream or may call out of the process:
- `POST /api/v1/runs` (`v1_runs_create`): enqueues a Celery run;
- `GET /api/v1/runs/{run_id}/events` (`v1_runs_events_retrieve`): SSE stream;
- `POST /api/v1/provider-connections/{id}/test` (`v1_provider_connections_test_create`):
  calls the provider;
- `POST /api/v1/tools/{name}/execute` (`v1_tools_execute_create`): may call out;
- `POST /api/v1/tools/try` (`v1_tools_try_create`): sends its draft's request (its own
  tests: tests/api/test_tool_drafts_api.py);
- `POST /api/v1/mcp-connections/{id}/test` and `/refresh`: call the MCP server;
- `POST /api/v1/tools/import` and `/import/preview`: fetch a document from a `url` (their
  hostile input is tested in tests/api/test_tool_imports_api.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import schemathesis
from django.core import signals
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.serializers.json import DjangoJSONEncoder
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from schemathesis import checks as st_checks
from schemathesis.config import SchemathesisConfig

from agentplatform.v1 import chat_completions, messages
from agents.models import Fact
from agents.runtime.spec import RunStatus
from tenancy import request_budgets, services
from tenancy.models import ApiKey, Membership
from tests.api.test_resources import as_key, key_for
from tests.conftest import make_trio
from tests.factories import make_connection, make_mcp_connection
from tests.module_data import module_rows

SKIPPED_OPERATIONS = [
    "v1_runs_create",
    "v1_runs_events_retrieve",
    "v1_provider_connections_test_create",
    "v1_tools_execute_create",
    "v1_tools_try_create",
    "v1_mcp_connections_test_create",
    "v1_mcp_connections_refresh_create",
    "v1_tools_import_create",
    "v1_tools_import_preview_create",
]

CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": 20260701,
        "suppress-health-check": ["all"],
        "generation": {
            "max-examples": 3,
            "deterministic": True,
            "database": "none",
            "no-shrink": True,
        },
        "phases": {
            "examples": {"enabled": True},
            "coverage": {
                "enabled": False,  # most of the runtime; examples + fuzzing stay
                "unexpected-methods": [],
                "generate-duplicate-query-parameters": False,
            },
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": False},
        },
    }
)

CHECKS = [
    st_checks.not_a_server_error,
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_headers_conformance,
    st_checks.response_schema_conformance,
]


# The bodies of the /v1 faces, fuzzed longer: every item of a request has a shape of its own.
V1_BODIES = [
    "openai_chat_completions_create",
    "openai_responses_create",
    "openai_embeddings_create",
    "anthropic_messages_create",
    "anthropic_messages_count_tokens",
]
V1_BODIES_CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": 20260702,
        "suppress-health-check": ["all"],
        "generation": {
            "max-examples": 40,
            "deterministic": True,
            "database": "none",
            "no-shrink": True,
        },
        "phases": {
            "examples": {"enabled": False},
            "coverage": {"enabled": False},
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": False},
        },
    }
)


def load_schema(raw: dict, config: SchemathesisConfig):
    """The document `/api/schema/` serves, generated without a request;
    `test_the_schema_is_valid_openapi` checks the endpoint serves this very one."""
    schema = schemathesis.openapi.from_dict(raw, config=config)
    schema.app = get_wsgi_application()
    schema.location = "/api/schema/"
    return schema


# Loaded when the tests run, not at collection: every xdist worker of both tiers collects this
# module, and building the schema, its operations' tests and their explicit examples took
# each about 3.5 s. The operations run as subtests of one test per schema; their filters
# are the lazy schema's (a fixture's own are replaced by them).
@pytest.fixture(scope="module")
def raw_schema() -> dict:
    generated = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(json.dumps(generated, cls=DjangoJSONEncoder))


@pytest.fixture(scope="module")
def whole_schema(raw_schema):
    return load_schema(raw_schema, CONFIG)


@pytest.fixture(scope="module")
def v1_bodies_schema(raw_schema):
    return load_schema(raw_schema, V1_BODIES_CONFIG)


API_PATHS = r"^/(api/)?v1/"
schema = schemathesis.pytest.from_fixture("whole_schema")
schema = schema.include(path_regex=API_PATHS).exclude(operation_id=SKIPPED_OPERATIONS)
v1_bodies = schemathesis.pytest.from_fixture("v1_bodies_schema").include(operation_id=V1_BODIES)


@pytest.fixture(scope="module")
def api_schema(whole_schema):
    """The operations `schema` tests, for the tests of one operation."""
    return whole_schema.include(path_regex=API_PATHS).exclude(operation_id=SKIPPED_OPERATIONS)


@pytest.fixture(autouse=True)
def _node_id_for_lazy_schemas(request):
    """schemathesis 4.32's lazy schemas name each operation's report by rewriting the test's
    `_nodeid`, which pytest 9.2's items no longer have (their `nodeid` is built)."""
    request.node._nodeid = request.node.nodeid


def test_the_schema_is_valid_openapi(client, api_schema):
    """The document validates against the OpenAPI 3.0 meta-schema, and every operation resolves."""
    from drf_spectacular.validation import validate_schema

    served = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert served.status_code == 200
    assert served.json()["paths"].keys() >= api_schema.raw_schema["paths"].keys()
    api_schema.validate()  # schemathesis' own OpenAPI 3.0 meta-schema check
    validate_schema(api_schema.raw_schema)  # drf-spectacular's, too
    ids = {op.ok().definition.raw.get("operationId") for op in api_schema.get_all_operations()}
    assert len(ids) > 40
    assert not ids & set(SKIPPED_OPERATIONS)
    assert ids >= OPENAI_OPERATIONS


OPENAI_OPERATIONS = {
    "openai_models_list",
    "openai_models_retrieve",
    "openai_chat_completions_create",
    "openai_responses_create",
    "openai_embeddings_create",
    "anthropic_messages_create",
    "anthropic_messages_count_tokens",
}


async def canned_progress(run, **kwargs):
    """In place of `follow_run`: a little text, then the ending of a succeeded run."""
    yield "Hello"
    yield " there."
    yield chat_completions.Ending(
        status=RunStatus.SUCCEEDED,
        output="Hello there.",
        error="",
        prompt_tokens=12,
        completion_tokens=3,
    )


@pytest.fixture(scope="module")
def module_seed(django_db_setup, django_db_blocker):
    """The seed, made once for the module's tests (tests/module_data.py): each test, and each
    generated case in it, meets it as made."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        made = module_rows(django_db_blocker, lambda: _seed(Client(), make_trio(), monkeypatch))
        with made as seed:
            yield seed


@pytest.fixture
def seeded(module_seed, db):
    """An admin key of acme and the ids of a few acme objects, keyed by path parameter."""
    # As Django's test client does: the WSGI app must not close the connection that holds
    # the test's transaction around each request.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield module_seed
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def _seed(client, trio, monkeypatch):
    # The fuzzer sends far more than the production budgets allow in a minute.
    for cls in (request_budgets.ApiKeyRateThrottle, request_budgets.TenantRateThrottle):
        monkeypatch.setattr(
            cls, "THROTTLE_RATES", {"api_key": "1000000/min", "tenant": "1000000/min"}
        )
    for face in (chat_completions, messages):  # no worker here
        monkeypatch.setattr(face, "follow_run", canned_progress)
    api = as_key(client, trio.acme, "read", "write", "run", "admin")
    assert (
        api.post(
            "/agents", {"slug": "writer", "name": "Writer", "instructions": "Write."}
        ).status_code
        == 201
    )
    assert (
        api.post("/crews", {"slug": "team", "name": "Team", "members": ["writer"]}).status_code
        == 201
    )
    tool = {
        "name": "weather",
        "kind": "http",
        "description": "Today's weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        "config": {"url": "https://api.example.com/weather"},
    }
    assert api.post("/tools", tool).status_code == 201, api.bodies[-1]
    flow = {
        "slug": "brief",
        "name": "Brief",
        "definition": {"steps": [{"id": "a", "tool": "weather", "arguments": {"city": "'Oslo'"}}]},
    }
    assert api.post("/workflows", flow).status_code == 201, api.bodies[-1]
    conversation = api.post("/conversations", {"agent": "writer", "title": "Hello"})
    assert conversation.status_code == 201, conversation.content
    connection = make_connection(
        trio.acme,
        "Local OpenAI",
        "openai",
        api_key="sk-test-key",
        base_url="http://127.0.0.1:9/v1",
        default_model="gpt-test",
        max_retries=0,
    )
    mcp = make_mcp_connection(trio.acme, "https://crm.example/mcp", "crm", auth_header="tok")
    fact = Fact.objects.create(tenant=trio.acme, user=trio.alice, text="Likes tea.")
    key_for(trio.acme, "read", name="spare")
    spare = ApiKey.objects.filter(tenant=trio.acme, name="spare").get()
    member = Membership.objects.get(tenant=trio.acme, user=trio.bob)
    invitation, _ = services.invitation_create(
        tenant=trio.acme, invitee="dana@example.test", role="member", invited_by=trio.alice
    )
    dataset = api.post("/datasets", {"name": "facts"}).json()["id"]
    case = api.post(
        f"/datasets/{dataset}/cases", {"input": "capital?", "expect": {"exact": "Paris"}}
    ).json()["id"]
    evaluation = api.post("/evaluations", {"dataset": "facts", "agent": "writer"}).json()["id"]
    trigger = api.post(
        "/triggers",
        {"name": "hook", "kind": "webhook", "agent": "writer", "run_as": "alice",
         "input_template": "New: {{payload.title}}"},
    )  # fmt: skip
    assert trigger.status_code == 201, trigger.content
    trigger_id = trigger.json()["id"]
    provider = api.post(
        "/identity-providers",
        {"slug": "acme-idp", "name": "Acme", "issuer": "https://idp.example", "client_id": "c"},
    )
    assert provider.status_code == 201, provider.content
    conversation_id = conversation.json()["id"]
    attachment = client.post(
        f"/api/v1/conversations/{conversation_id}/attachments",
        {"file": SimpleUploadedFile("notes.txt", b"Some notes.")},
        HTTP_AUTHORIZATION=f"Bearer {api.key}",
    )
    assert attachment.status_code == 201, attachment.content
    attached = {"conversation": conversation_id, "id": attachment.json()["id"]}
    return api.key, {
        "/api/v1/conversations/{conversation}/attachments": {"conversation": conversation_id},
        "/api/v1/conversations/{conversation}/attachments/{id}": attached,
        "/api/v1/conversations/{conversation}/attachments/{id}/content": attached,
        "/api/v1/identity-providers/{id}": {"id": provider.json()["id"]},
        "/api/v1/triggers/{trigger_id}": {"trigger_id": trigger_id},
        "/api/v1/triggers/{trigger_id}/rotate-secret": {"trigger_id": trigger_id},
        "/api/v1/triggers/{trigger_id}/runs": {"trigger_id": trigger_id},
        "/api/v1/datasets/{dataset_id}": {"dataset_id": dataset},
        "/api/v1/datasets/{dataset_id}/cases": {"dataset_id": dataset},
        "/api/v1/datasets/{dataset_id}/cases/{case_id}": {"dataset_id": dataset, "case_id": case},
        "/api/v1/evaluations/{evaluation_id}": {"evaluation_id": evaluation},
        "/api/v1/evaluations/{evaluation_id}/cancel": {"evaluation_id": evaluation},
        "/api/v1/evaluations/{evaluation_id}/compare/{other_id}": {
            "evaluation_id": evaluation,
            "other_id": evaluation,
        },
        "/api/v1/agents/{slug}": {"slug": "writer"},
        "/api/v1/crews/{slug}": {"slug": "team"},
        "/api/v1/workflows/{slug}": {"slug": "brief"},
        "/api/v1/tools/{name}": {"name": "weather"},
        "/api/v1/conversations/{id}": {"id": conversation.json()["id"]},
        "/api/v1/conversations/{id}/messages": {"id": conversation.json()["id"]},
        "/api/v1/conversations/{id}/branches": {"id": conversation.json()["id"]},
        "/api/v1/conversations/{id}/edit": {"id": conversation.json()["id"]},
        "/api/v1/conversations/{id}/fork": {"id": conversation.json()["id"]},
        "/api/v1/conversations/{id}/switch": {"id": conversation.json()["id"]},
        "/api/v1/provider-connections/{id}": {"id": connection.pk},
        "/api/v1/mcp-connections/{id}": {"id": mcp.pk},
        "/api/v1/facts/{id}": {"id": fact.pk},
        "/api/v1/api-keys/{id}": {"id": spare.pk},
        "/api/v1/api-keys/{id}/revoke": {"id": spare.pk},
        "/api/v1/members/{id}": {"id": member.pk},
        "/api/v1/invitations/{id}": {"id": invitation.pk},
        "/v1/models/{model_id}": {"model_id": "writer"},
    }


def validate(case, headers):
    response = case.call(headers=headers)
    case.validate_response(response, checks=CHECKS, headers=headers)


@contextmanager
def rolled_back() -> Iterator[None]:
    """A generated case's writes undone after it: every case meets the seed as made (a case
    deleting the seeded agent leaves it to the next)."""
    case_transaction = transaction.atomic()
    case_transaction._from_testcase = True  # durable blocks nest in it as in a TestCase
    with case_transaction:
        yield
        transaction.set_rollback(True)


# (module_seed named here: a lazy test asks for `seeded` only once it runs, inside the test's
# transaction, where the module's must not begin.)
@pytest.mark.django_db
@pytest.mark.usefixtures("module_seed")
@schema.parametrize()
def test_the_api_conforms_to_its_schema(case, seeded):
    key, ids = seeded
    headers = {"Authorization": f"Bearer {key}"}
    with rolled_back():
        validate(case, headers)
        if case.path in ids:  # once more, on a real object
            real = case.operation.Case(
                path_parameters={**case.path_parameters, **ids[case.path]},
                headers=dict(case.headers or {}),
                query=case.query,
                body=case.body,
                media_type=case.media_type,
            )
            validate(real, headers)


@pytest.mark.django_db
@pytest.mark.usefixtures("module_seed")
@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous")  # WSGI
@v1_bodies.parametrize()
def test_the_v1_faces_answer_any_body_in_their_schema(case, seeded):
    """Longer: generated bodies, valid and not, of the /v1 faces that take one; each gets a
    documented answer (a 400 in the face's error shape for a bad one), never a 5xx."""
    key, _ = seeded
    with rolled_back():
        validate(case, {"Authorization": f"Bearer {key}"})


@pytest.fixture
def operation(api_schema):
    return api_schema.find_operation_by_id


@pytest.mark.django_db
def test_api_keys_conform_when_the_creator_is_an_api_key(seeded, operation):
    key, _ = seeded
    case = operation("v1_api_keys_list").Case()
    headers = {"Authorization": f"Bearer {key}"}
    case.validate_response(case.call(headers=headers), checks=CHECKS, headers=headers)


@pytest.mark.django_db
def test_the_tools_list_conforms(seeded, operation):
    key, _ = seeded
    case = operation("v1_tools_list").Case()
    headers = {"Authorization": f"Bearer {key}"}
    case.validate_response(case.call(headers=headers), checks=CHECKS, headers=headers)


@pytest.mark.django_db
def test_415_is_documented(seeded, operation):
    key, ids = seeded
    case = operation("v1_members_update").Case(
        path_parameters=ids["/api/v1/members/{id}"],
        headers={"Content-Type": "text/plain"},
        body='{"role": "admin"}',
        media_type="text/plain",
    )
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "text/plain"}
    response = case.call(headers=headers)
    assert response.status_code == 415
    case.validate_response(response, checks=CHECKS, headers=headers)


@pytest.mark.django_db
@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous")  # WSGI
@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_completion_of_a_real_agent_conforms(seeded, operation, stream):
    key, _ = seeded
    body = {"model": "writer", "messages": [{"role": "user", "content": "Hi."}], "stream": stream}
    case = operation("openai_chat_completions_create").Case(
        body=body, media_type="application/json"
    )
    headers = {"Authorization": f"Bearer {key}"}
    response = case.call(headers=headers)
    assert response.status_code == 200
    case.validate_response(response, checks=CHECKS, headers=headers)
    if stream:
        assert response.headers["content-type"][0].startswith("text/event-stream")
        assert response.text.rstrip().endswith("data: [DONE]")
    else:
        assert response.json()["choices"][0]["message"]["content"] == "Hello there."


@pytest.mark.django_db
@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous")  # WSGI
@pytest.mark.parametrize("stream", [False, True])
def test_a_message_of_a_real_agent_conforms(seeded, operation, stream):
    key, _ = seeded
    body = {
        "model": "writer",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi."}]}],
        "stream": stream,
    }
    case = operation("anthropic_messages_create").Case(body=body, media_type="application/json")
    headers = {"x-api-key": key}
    response = case.call(headers=headers)
    assert response.status_code == 200, response.text
    case.validate_response(response, checks=CHECKS, headers=headers)
    if stream:
        assert response.headers["content-type"][0].startswith("text/event-stream")
        assert response.text.rstrip().endswith('data: {"type":"message_stop"}')
    else:
        assert response.json()["content"] == [{"type": "text", "text": "Hello there."}]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("operation_id", "body", "status"),
    [
        ("openai_embeddings_create", {"model": "static", "input": ["a cat", "a dog"]}, 200),
        ("openai_embeddings_create", {"model": "static", "input": "a", "encoding_format": "hex"},
         400),
        ("anthropic_messages_count_tokens", {"model": "writer", "messages": [
            {"role": "user", "content": "x" * 40}]}, 200),
        ("anthropic_messages_create", {"model": "writer", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "document"}]}]}, 400),
    ],
)  # fmt: skip
def test_embeddings_token_counts_and_refusals_conform(
    seeded, operation, operation_id, body, status
):
    key, _ = seeded
    case = operation(operation_id).Case(body=body, media_type="application/json")
    headers = {"Authorization": f"Bearer {key}"}
    response = case.call(headers=headers)
    assert response.status_code == status, response.text
    case.validate_response(response, checks=CHECKS, headers=headers)
