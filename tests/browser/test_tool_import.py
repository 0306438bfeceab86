"""Tools without writing JSON, in Chromium (issue #40): an admin imports two operations of
the Swagger petstore (tests/data/openapi/, uploaded) pointed at a local server that plays the API, a
member's chat calls one of them and the server receives the secret; and a cURL command
becomes a tool in the form, tried before it is saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.models import Run
from tests.browser.conftest import DESKTOP, assert_accessible
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "pet-store-key-5521"
PETSTORE = Path(__file__).parents[1] / "data/openapi/swagger-petstore-3.0.yaml"


@pytest.fixture
def tab(axe_tab):  # axe-core on every page
    return axe_tab


def assert_fits_a_phone(tab, what: str) -> None:
    tab.page.set_viewport_size({"width": 390, "height": 844})
    widths = tab.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{what} scrolls sideways: {widths}"
    tab.page.set_viewport_size(DESKTOP)


@pytest.fixture
def pet_api():
    with LocalServer() as server:
        server.route("GET", "/pet/7", Reply(json={"id": 7, "name": "Rex", "status": "sold"}))
        server.route("GET", "/pets/42", Reply(json={"id": 42, "name": "Tom"}))
        yield server


def test_an_imported_operation_is_called_from_a_chat_with_its_secret(
    trio, agent, pet_api, provider_server, celery_worker_process, tab
):
    tab.login("alice")
    tab.goto("/t/acme/tools/")
    page = tab.page
    page.get_by_role("link", name="Import from OpenAPI").click()
    # Uploaded, not pasted: Chromium takes seconds to fill a textarea with 23 KB (over 10 s on
    # a loaded machine); pasting reaches the same service (tests/web/test_tool_import_pages.py).
    page.get_by_label("Upload a file").set_input_files(PETSTORE)
    page.get_by_label("API base URL (optional)").fill(pet_api.url)
    page.get_by_role("button", name="Preview the tools").click()

    pet = page.locator(".import-tool", has_text="getPetById")
    pet.wait_for()
    assert "Find pet by ID." in pet.text_content()
    assert "petId" in pet.locator("table.arguments").text_content()
    assert "sends the secret (header)" in pet.text_content()
    assert page.locator(".import-tool").count() > 5
    tab.screenshot("tool-import-preview")
    assert_accessible(tab, "import preview")
    assert_fits_a_phone(tab, "import preview")
    for box in page.locator('input[name="operations"]:not([disabled])').all():
        box.set_checked(False)
    page.get_by_role("checkbox", name="getPetById").check()
    page.get_by_role("checkbox", name="getInventory").check()
    page.get_by_label("Secret").fill(SECRET)
    page.get_by_role("button", name="Import the chosen tools").click()
    page.wait_for_url(lambda url: url.endswith("/t/acme/tools/"))
    assert "Imported 2 tools: getPetById, getInventory." in page.content()
    assert SECRET not in page.content()
    names = set(ToolDefinition.objects.filter(tenant=trio.acme).values_list("name", flat=True))
    assert names == {"getPetById", "getInventory"}

    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "getPetById", json.dumps({"petId": 7}))]),
        TextReply("Pet 7 is **Rex**, already sold."),
    )
    tab.page.context.clear_cookies()
    tab.login("bob")
    tab.goto("/t/acme/chat/?agent=assistant")
    field = page.get_by_label("Message")
    field.fill("Who is pet 7?")
    field.press("Enter")
    page.locator(".segment:not(.streaming) strong", has_text="Rex").wait_for(timeout=15_000)
    run = Run.objects.filter(conversation__owner_user=trio.bob).latest("pk")
    assert run.status == "succeeded", run.error
    [received] = [r for r in pet_api.requests if r.path == "/pet/7"]
    assert received.method == "GET" and received.headers["api_key"] == SECRET
    tab.assert_clean()


def test_a_curl_command_becomes_a_tool_tried_in_the_form_before_saving(trio, pet_api, tab):
    tab.login("alice")
    tab.goto("/t/acme/tools/import/curl/")
    page = tab.page
    page.get_by_label("cURL command").fill(f"curl -H 'X-API-Key: {SECRET}' {pet_api.url}/pets/42")
    page.get_by_role("button", name="Read the command").click()
    page.get_by_label("Make path.42 an argument").check()
    page.get_by_label("Argument name for path.42").fill("pet_id")
    page.get_by_label("Type for path.42").select_option("integer")
    page.get_by_label("Tool name").fill("pet_by_id")
    page.get_by_role("button", name="Preview the tool").click()
    draft = page.locator(".curl-draft")
    draft.wait_for()
    assert "pet_id" in draft.locator("table.arguments").text_content()
    assert SECRET not in page.content()
    tab.screenshot("tool-import-curl")
    assert_accessible(tab, "cURL page")
    assert_fits_a_phone(tab, "cURL page")

    page.get_by_role("button", name="Open it in the tool form").click()
    page.wait_for_url(lambda url: url.endswith("/t/acme/tools/new/"))
    assert page.get_by_label("Name", exact=True).input_value() == "pet_by_id"
    page.get_by_label("Secret", exact=True).fill(SECRET)
    page.get_by_role("textbox", name="Arguments (JSON)").fill('{"pet_id": 42}')
    page.get_by_role("button", name="Try it", exact=True).click()
    result = page.locator("#dry-call-result")
    result.locator("text=HTTP 200").wait_for()
    shown = result.locator("pre.http-request").text_content()
    assert f"GET {pet_api.url}/pets/42" in shown and "***" in shown and SECRET not in shown
    assert "Tom" in result.locator(".dry-call-answer").text_content()
    assert SECRET not in page.content()
    [received] = [r for r in pet_api.requests if r.path == "/pets/42"]
    assert received.headers["x-api-key"] == SECRET
    assert not ToolDefinition.objects.filter(tenant=trio.acme).exists()  # tried, not saved
    result.scroll_into_view_if_needed()
    tab.screenshot("tool-try-it")
    assert_accessible(tab, "tool form with a Try-it result")
    tab.assert_clean()
