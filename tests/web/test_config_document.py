"""The configuration document page (agentplatform/web/config/document.py): download,
upload or paste, preview the diff, apply; admins only."""

from __future__ import annotations

import json

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from agents.models import Agent
from tenancy.models import Role
from tests.factories import add_member, login, make_agent, make_connection, make_user

pytestmark = pytest.mark.django_db

PLANTED = "sk-ant-PLANTED-web-777"
DOC = "version: 1\nagents:\n- slug: support\n  name: Support\n  instructions: Hi.\n"


def url(view: str) -> str:
    return reverse(f"config:{view}", kwargs={"tenant_slug": "acme"})


def owner(trio) -> Client:
    return login(Client(), trio.alice)


def test_admins_see_the_page_members_and_viewers_get_403_outsiders_404(trio):
    assert owner(trio).get(url("document")).status_code == 200
    for role in (Role.MEMBER, Role.VIEWER):
        user = make_user(f"u-{role}")
        add_member(trio.acme, user, role)
        client = login(Client(), user)
        for view in ("document", "document_download"):
            assert client.get(url(view)).status_code == 403
        assert client.post(url("document"), {"text": DOC, "action": "apply"}).status_code == 403
    outsider = login(Client(), trio.charlie)
    assert outsider.get(url("document_download")).status_code == 404
    assert outsider.post(url("document"), {"text": DOC, "action": "apply"}).status_code == 404
    assert not Agent.objects.exists()


def test_the_download_is_the_document_without_secrets(trio):
    make_connection(trio.acme, "claude", kind="anthropic", api_key=PLANTED)
    client = owner(trio)
    response = client.get(url("document_download"))
    assert response["Content-Disposition"] == 'attachment; filename="acme-config.yaml"'
    text = response.content.decode()
    assert PLANTED not in text
    assert yaml.safe_load(text)["connections"][0]["secret"] == "connection:claude"
    as_json = client.get(url("document_download"), {"format": "json"})
    assert json.loads(as_json.content) == yaml.safe_load(text)
    assert PLANTED not in client.get(url("document")).content.decode()


def test_preview_shows_the_diff_and_changes_nothing_then_apply_does(trio):
    make_agent(trio.acme, "support", name="Support", instructions="Hello.")
    client = owner(trio)
    preview = client.post(url("document"), {"text": DOC, "action": "preview"})
    page = preview.content.decode()
    assert preview.status_code == 200 and "Changes it would make" in page
    assert "instructions" in page and "&quot;Hello.&quot;" in page and "&quot;Hi.&quot;" in page
    assert Agent.objects.get(slug="support").instructions == "Hello."
    assert "Hi." in page  # the document stays in the box for "Apply"
    applied = client.post(url("document"), {"text": DOC, "action": "apply"}, follow=True)
    assert "Applied 1 change(s)." in applied.content.decode()
    assert Agent.objects.get(slug="support").instructions == "Hi."
    again = client.post(url("document"), {"text": DOC, "action": "preview"})
    assert "No changes" in again.content.decode()


def test_an_uploaded_file_is_read_like_pasted_text(trio):
    upload = SimpleUploadedFile("acme.json", json.dumps(yaml.safe_load(DOC)).encode())
    response = owner(trio).post(url("document"), {"upload": upload, "action": "apply"})
    assert response.status_code == 302
    assert Agent.objects.get(tenant=trio.acme, slug="support").instructions == "Hi."


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("version: 1\nagents:\n- {slug: a, name: A, connection: nowhere}\n",
         "unknown connection &#x27;nowhere&#x27;"),
        ("version: [\n", "not valid YAML"),
        ("", "Upload a document or paste one."),
    ],
)  # fmt: skip
def test_problems_are_listed_with_their_path_and_nothing_changes(trio, text, shown):
    response = owner(trio).post(url("document"), {"text": text, "action": "apply"})
    assert response.status_code == 400
    assert shown in response.content.decode()
    assert not Agent.objects.exists()


def test_applying_a_new_webhook_shows_its_secret_on_that_answer_only(trio):
    from agents.models import Trigger

    doc = DOC + (
        "triggers:\n- {name: issues, kind: webhook, agent: support, run_as: alice, "
        "input_template: go}\n"
    )
    client = owner(trio)
    preview = client.post(url("document"), {"text": doc, "action": "preview"})
    assert "new signing secret" in preview.content.decode()
    applied = client.post(url("document"), {"text": doc, "action": "apply"})
    secret = Trigger.objects.get(tenant=trio.acme, name="issues").secret
    assert applied.status_code == 200 and secret in applied.content.decode()
    assert secret not in client.get(url("document")).content.decode()
    assert secret not in client.get(url("document_download")).content.decode()


def test_the_preview_refuses_a_secret_moved_with_its_url_as_applying_does(trio):
    """The preview runs the import's every check (tests/agents/test_config_dry_run.py)."""
    from tests.agents.config_corpus import PLANTED, secret_holders
    from tools.models import ToolDefinition

    secret_holders(trio)
    client = owner(trio)
    data = yaml.safe_load(client.get(url("document_download")).content)
    data["tools"][0]["config"]["url"] = "https://evil.test/lookup"
    text = yaml.safe_dump(data)
    for action in ("preview", "apply"):
        response = client.post(url("document"), {"text": text, "action": action})
        page = response.content.decode().replace("&#x27;", "'")
        assert response.status_code == 400, action
        assert "<code>tools[0].secret</code>" in page
        assert "The URL's host changed: enter the secret again, or clear it." in page
        assert "Changes it would make" not in page and PLANTED not in page
    assert (
        ToolDefinition.objects.get(name="lookup").config["url"] == "https://api.example.com/lookup"
    )
