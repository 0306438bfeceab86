"""The tool import pages (agentplatform/web/config/tool_imports.py, tool_curl.py) and "Try it"
in the tool form (tool_dry_call.py): previews through the services, saves all or nothing,
refusals on top, the secret never in the HTML, admins only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.sessions.models import Session
from django.urls import reverse

from agents.models import Run
from tenancy.models import Role
from tests.factories import add_member, login, make_http_tool, make_tool, make_user
from tests.tools.local_server import LocalServer, Reply
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db

SECRET = "pet-SECRET-7731"
PETSTORE = (Path(__file__).parents[1] / "data/openapi/swagger-petstore-3.0.yaml").read_text()
PETS = """openapi: 3.0.0
info: {title: Pets, version: "1"}
servers: [{url: "https://pets.example.com/v1"}]
paths:
  /pets/{petId}:
    get:
      operationId: getPet
      summary: Find a pet by id
      parameters:
        - {name: petId, in: path, required: true, description: The pet's id,
           schema: {type: integer}}
        - {name: fields, in: query, schema: {type: array, items: {type: string}}}
      responses: {"200": {description: ok}}
  /pets:
    post:
      operationId: addPet
      summary: Add a pet
      requestBody:
        content: {application/json: {schema: {type: object, properties: {name: {type: string}}}}}
      responses: {"201": {description: ok}}
  /upload:
    post:
      operationId: upload
      requestBody:
        required: true
        content: {multipart/form-data: {schema: {type: object}}}
      responses: {"201": {description: ok}}
security: [{key: []}]
components:
  securitySchemes: {key: {type: apiKey, in: header, name: X-API-Key}}
"""


def url(view: str, **kwargs) -> str:
    return reverse(f"config:{view}", kwargs={"tenant_slug": "acme", **kwargs})


@pytest.fixture
def admin(client, trio):
    return login(client, trio.alice)


@pytest.fixture
def local_server(settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]  # the local server; nothing else private
    with LocalServer() as server:
        yield server


# -- OpenAPI ------------------------------------------------------------------------------


def test_the_preview_shows_each_operation_as_the_model_will_see_it(admin, trio):
    make_http_tool(
        trio.acme, "getPet", "https://pets.example.com/v1/pets/{petId}", description="Old words"
    )
    response = admin.post(url("tool_import"), {"step": "preview", "document": PETS})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Pets" in page and "https://pets.example.com/v1" in page
    # getPet exists: changed, with the fields and their diff; addPet is new.
    assert "changed: description, input_schema" in page
    assert "-  &quot;Old words&quot;" in page or "Old words" in page
    assert ">new<" in page
    # The compact argument table: name, type, required, description; the JSON a click away.
    assert "<code>petId</code></td><td>integer</td><td>yes</td><td>The pet&#x27;s id</td>" in page
    assert "list of string" in page
    assert "Input schema as JSON" in page
    # Skipped with the reason; the credential asked once.
    assert "POST /upload" in page and "multipart" in page
    assert page.count('name="secret"') == 1
    assert page.count('name="operations"') == 2
    assert ToolDefinition.objects.filter(tenant=trio.acme).count() == 1  # nothing saved


def test_saving_the_chosen_operations_stores_them_with_the_one_secret(admin, trio):
    response = admin.post(
        url("tool_import"),
        {"step": "save", "document": PETS, "operations": ["getPet", "addPet"], "secret": SECRET},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == url("tools")
    assert "Imported 2 tools: getPet, addPet." in response.content.decode()
    assert SECRET not in response.content.decode()
    saved = {t.name: t for t in ToolDefinition.objects.filter(tenant=trio.acme)}
    assert set(saved) == {"getPet", "addPet"}
    assert saved["getPet"].secret == SECRET
    assert saved["getPet"].config["auth"] == {"type": "header", "header": "X-API-Key"}


def test_a_refused_save_saves_nothing_and_keeps_the_preview_and_the_choice(admin, trio):
    response = admin.post(
        url("tool_import"), {"step": "save", "document": PETS, "operations": ["addPet"]}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "Nothing was imported." in page and "give the secret" in page
    assert 'value="addPet" id="op-2" checked' in page
    assert not ToolDefinition.objects.filter(tenant=trio.acme).exists()
    response = admin.post(url("tool_import"), {"step": "save", "document": PETS, "secret": "x"})
    assert response.status_code == 400
    assert "Pick at least one operation" in response.content.decode()
    # A choice the (re-read) document does not have is refused too.
    response = admin.post(
        url("tool_import"),
        {"step": "save", "document": PETS, "operations": ["deleteAll"], "secret": SECRET},
    )
    assert response.status_code == 400
    assert "The document has no operation" in response.content.decode()
    assert not ToolDefinition.objects.filter(tenant=trio.acme).exists()


@pytest.mark.parametrize(
    ("posted", "message"),
    [
        ({"document": "openapi: [unclosed"}, "neither JSON nor YAML"),
        ({"url": "http://10.0.0.7/openapi.json"}, "Cannot fetch the document"),
        ({"url": "file:///etc/passwd"}, "Cannot fetch the document"),
        ({"document": PETS, "url": "https://x.example/o.json"}, "(one)"),
        ({}, "Give the document"),
        ({"document": "x" * 2_000_001}, "at most 2000000 characters"),
    ],
)
def test_a_bad_document_or_url_is_shown_on_top_and_nothing_is_saved(admin, trio, posted, message):
    response = admin.post(url("tool_import"), {"step": "preview", **posted})
    assert response.status_code == 400
    page = response.content.decode()
    assert message in page, page[page.find("<main") :][:2000]
    assert 'role="alert"' in page
    assert not ToolDefinition.objects.filter(tenant=trio.acme).exists()


def test_an_uploaded_file_is_previewed_then_saved_from_the_text_it_carried(admin, trio):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("petstore.yaml", PETSTORE.encode(), "application/yaml")
    response = admin.post(url("tool_import"), {"step": "preview", "file": upload})
    assert response.status_code == 200
    page = response.content.decode()
    assert "getPetById" in page and "getInventory" in page
    assert '<textarea name="document" hidden' in page  # the text goes back with the choice
    response = admin.post(
        url("tool_import"),
        {"step": "save", "document": PETSTORE, "operations": ["getPetById"], "secret": SECRET},
    )
    assert response.status_code == 302
    assert ToolDefinition.objects.get(tenant=trio.acme).name == "getPetById"


# -- cURL ---------------------------------------------------------------------------------

CURL = (
    "curl -H 'Authorization: Bearer " + SECRET + "' "
    "'https://api.example.com/v1/pets/42?units=metric'"
)


def test_a_curl_command_lists_its_values_and_never_shows_its_secret(admin, trio):
    response = admin.post(url("tool_import_curl"), {"step": "read", "command": CURL})
    assert response.status_code == 200
    page = response.content.decode()
    assert SECRET not in page
    assert "<code>path.42</code>" in page and "<code>query.units</code>" in page
    assert "credential was found" in page
    # The command waits in the session's row encrypted: no credential there either.
    assert all(SECRET not in str(row.get_decoded()) for row in Session.objects.all())
    marks = {"mark_2": "on", "name_2": "pet_id", "type_2": "integer", "description_2": "Which"}
    response = admin.post(url("tool_import_curl"), {"step": "preview", "name": "get_pet", **marks})
    page = response.content.decode()
    assert SECRET not in page
    assert "<code>pet_id</code></td><td>integer</td><td>yes</td><td>Which</td>" in page
    assert "https://api.example.com/v1/pets/{pet_id}" in page
    response = admin.post(url("tool_import_curl"), {"step": "save", "name": "get_pet", **marks})
    saved = ToolDefinition.objects.get(tenant=trio.acme, name="get_pet")
    assert response.status_code == 302 and response.url == url("tool_edit", pk=saved.pk)
    assert saved.secret == SECRET and saved.config["auth"] == {"type": "bearer"}
    # The command left the session with the save.
    response = admin.post(url("tool_import_curl"), {"step": "save", "name": "again"})
    assert response.status_code == 400 and "paste it again" in response.content.decode()


def test_a_curl_draft_opens_in_the_tool_form_prefilled_without_its_secret(admin, trio):
    admin.post(url("tool_import_curl"), {"step": "read", "command": CURL})
    response = admin.post(url("tool_import_curl"), {"step": "form", "name": "pets_by_id"})
    assert response.status_code == 302 and response.url == url("tool_create")
    page = admin.get(response.url).content.decode()
    assert 'value="pets_by_id"' in page and "api.example.com/v1/pets/42" in page
    assert SECRET not in page and "give it as the secret" in page
    assert "pets_by_id" not in admin.get(url("tool_create")).content.decode()  # used once
    assert not ToolDefinition.objects.filter(tenant=trio.acme).exists()


def test_a_refused_curl_command_is_explained_and_not_echoed(admin):
    command = f"curl -H 'Authorization: Bearer {SECRET}' https://x.example/a; rm -rf /"
    response = admin.post(url("tool_import_curl"), {"step": "read", "command": command})
    assert response.status_code == 400
    page = response.content.decode()
    assert "Shell operators" in page and SECRET not in page


# -- Try it (the dry call) ----------------------------------------------------------------


def form_post(server_url: str, **extra) -> dict:
    config = {
        "method": "GET",
        "url": f"{server_url}/pets/{{pet_id}}",
        "arguments": [{"argument": "pet_id", "to": "path"}],
        "auth": {"type": "header", "header": "X-API-Key"},
    }
    schema = {"type": "object", "properties": {"pet_id": {"type": "integer"}}}
    return {
        "editor": "json",
        "name": "pet",
        "description": "One pet.",
        "input_schema": json.dumps(schema),
        "config": json.dumps(config),
        "effect": "",
        "idempotent": "unknown",
        "timeout_s": "30",
        "try_arguments": '{"pet_id": 7}',
        "try": "send",
        **extra,
    }


def test_the_tool_form_offers_try_it_for_http_tools_only(admin, trio):
    tool = make_http_tool(trio.acme, "pet", "https://x.example/pets")
    page = admin.get(url("tool_edit", pk=tool.pk)).content.decode()
    assert "Try it before saving" in page and url("tool_edit_dry_call", pk=tool.pk) in page
    assert url("tool_dry_call") in admin.get(url("tool_create")).content.decode()
    calc = make_tool(trio.acme, "calc")
    assert "Try it before saving" not in admin.get(url("tool_edit", pk=calc.pk)).content.decode()


def test_try_it_sends_the_unsaved_fields_and_masks_the_secret(admin, trio, local_server):
    local_server.route("GET", "/pets/7", Reply(json={"id": 7, "name": "Rex"}))
    response = admin.post(url("tool_dry_call"), form_post(local_server.url, secret=SECRET))
    assert response.status_code == 200
    page = response.content.decode()
    assert f"GET {local_server.url}/pets/7" in page and "X-Api-Key: ***" in page.replace(
        "X-API-Key", "X-Api-Key"
    )
    assert "HTTP 200" in page and "Rex" in page and SECRET not in page
    [received] = local_server.requests
    assert received.headers["x-api-key"] == SECRET
    assert not ToolDefinition.objects.filter(tenant=trio.acme).exists()
    assert Run.objects.filter(tenant=trio.acme).count() == 1


def test_try_it_on_a_saved_tool_uses_its_stored_secret_when_left_blank(admin, trio, local_server):
    tool = make_http_tool(trio.acme, "pet", url=f"{local_server.url}/pets/7", secret=SECRET)
    local_server.route("GET", "/pets/7", Reply(json={"id": 7}))
    posted = form_post(local_server.url)
    response = admin.post(url("tool_edit_dry_call", pk=tool.pk), posted)
    assert response.status_code == 200, response.content.decode()[:3000]
    assert local_server.requests[-1].headers["x-api-key"] == SECRET
    # Show only: nothing sent.
    before = len(local_server.requests)
    response = admin.post(url("tool_edit_dry_call", pk=tool.pk), {**posted, "try": "show"})
    assert "(not sent)" in response.content.decode()
    assert len(local_server.requests) == before
    tool.refresh_from_db()
    assert tool.config["url"] == f"{local_server.url}/pets/7"  # unchanged: nothing saved


def test_try_it_past_the_members_request_budget_sends_nothing(admin, trio, local_server, rates):
    rates("1/min", None)
    local_server.route("GET", "/pets/7", Reply(json={"id": 7}))
    posted = form_post(local_server.url, secret=SECRET)
    assert admin.post(url("tool_dry_call"), posted).status_code == 200
    shown = admin.post(url("tool_dry_call"), {**posted, "try": "show"})  # (not counted)
    assert shown.status_code == 200 and "(not sent)" in shown.content.decode()
    refused = admin.post(url("tool_dry_call"), posted)
    assert refused.status_code == 429
    assert "Rate limit reached; retry in" in refused.content.decode()
    panel = admin.post(url("tool_dry_call"), posted, headers={"HX-Request": "true"})
    assert panel.status_code == 200 and "Rate limit reached" in panel.content.decode()
    assert len(local_server.requests) == 1
    assert Run.objects.filter(tenant=trio.acme).count() == 1


def test_try_it_explains_what_is_wrong_before_sending(admin, local_server):
    response = admin.post(
        url("tool_dry_call"), form_post(local_server.url, try_arguments="[1]", secret=SECRET)
    )
    assert response.status_code == 400 and "give a JSON object" in response.content.decode()
    response = admin.post(url("tool_dry_call"), form_post(local_server.url))  # no secret
    assert "needs a secret" in response.content.decode()
    response = admin.post(url("tool_dry_call"), form_post(local_server.url, config="{"))
    assert "HTTP request" in response.content.decode()
    assert local_server.requests == []


# -- who may ------------------------------------------------------------------------------


def test_members_get_403_and_other_tenants_admins_404(client, trio):
    tool = make_http_tool(trio.acme, "pet", "https://x.example/pets")
    pages = [url("tool_import"), url("tool_import_curl")]
    posts = [url("tool_dry_call"), url("tool_edit_dry_call", pk=tool.pk)]
    login(client, trio.bob)  # a member of acme
    for page in pages:
        assert client.get(page).status_code == 403
    for page in pages + posts:
        assert client.post(page, {"step": "save", "document": PETS}).status_code == 403
    login(client, trio.charlie)  # globex's owner
    for page in pages + posts:
        assert client.post(page, {"step": "preview", "document": PETS}).status_code == 404
    dana = make_user("dana")
    add_member(trio.globex, dana, Role.ADMIN)
    login(client, dana)
    globex_url = reverse(
        "config:tool_edit_dry_call", kwargs={"tenant_slug": "globex", "pk": tool.pk}
    )
    assert client.post(globex_url, form_post("https://x.example")).status_code == 404
    assert not ToolDefinition.objects.exclude(pk=tool.pk).exists()
