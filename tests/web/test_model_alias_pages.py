"""Model alias pages (agentplatform/web/config/model_aliases.py): an admin creates, edits
and deletes one (one connection/model per line), errors beside the field; members get
403, another tenant's admin 404, and the anonymous the sign-in page."""

from __future__ import annotations

import pytest

from providers.models import ModelAlias
from tests.factories import login, make_connection
from tests.web.test_config import url


@pytest.fixture
def alias(trio):
    make_connection(trio.acme, "Main", "openai", api_key="k1", default_model="m")
    make_connection(trio.acme, "Backup", "openai", api_key="k2", default_model="b")
    return ModelAlias.objects.create(
        tenant=trio.acme, name="chat", targets=[{"connection": "Main", "model": "m"}]
    )


def test_an_admin_creates_edits_and_deletes_an_alias(client, trio, alias):
    login(client, trio.alice)
    listing = client.get(url("connections")).content.decode()
    assert "alias/chat" in listing and "Main/m" in listing
    data = {"name": "fast", "targets": "main/m\nBackup", "load_balancing": "round_robin"}
    assert client.post(url("model_alias_create"), data).status_code == 302
    fast = ModelAlias.objects.get(tenant=trio.acme, name="fast")
    assert fast.targets == [
        {"connection": "Main", "model": "m"},
        {"connection": "Backup", "model": ""},
    ]
    page = client.get(url("model_alias_edit", pk=fast.pk)).content.decode()
    assert "Main/m\nBackup" in page
    edited = {**data, "targets": "Backup/b2"}
    assert client.post(url("model_alias_edit", pk=fast.pk), edited).status_code == 302
    fast.refresh_from_db()
    assert fast.targets == [{"connection": "Backup", "model": "b2"}]
    assert client.post(url("model_alias_delete", pk=fast.pk)).status_code == 302
    assert not ModelAlias.objects.filter(pk=fast.pk).exists()


def test_errors_show_beside_the_field_and_nothing_is_saved(client, trio, alias):
    login(client, trio.alice)
    for targets, said in (("Nowhere/x", "unknown connection"), ("", "required")):
        response = client.post(url("model_alias_create"), {"name": "x", "targets": targets})
        assert response.status_code == 400
        body = response.content.decode()
        assert 'id="id_targets_error"' in body and said in body
    taken = client.post(url("model_alias_create"), {"name": "chat", "targets": "Main"})
    assert "Another model alias" in taken.content.decode()
    assert ModelAlias.objects.filter(tenant=trio.acme).count() == 1


def test_members_get_403(client, trio, alias):
    login(client, trio.bob)
    for page in (url("model_alias_create"), url("model_alias_edit", pk=alias.pk)):
        assert client.get(page).status_code == 403
    response = client.post(url("model_alias_delete", pk=alias.pk))
    assert response.status_code == 403 and ModelAlias.objects.filter(pk=alias.pk).exists()


def test_another_tenants_admin_gets_404(client, trio, alias):
    login(client, trio.charlie)
    for page in (url("model_alias_edit", pk=alias.pk), url("model_alias_delete", pk=alias.pk)):
        assert client.get(page).status_code == 404
        own = page.replace("/t/acme/", "/t/globex/")
        assert client.get(own).status_code == 404


def test_the_anonymous_are_sent_to_sign_in(client, trio, alias):
    response = client.get(url("model_alias_edit", pk=alias.pk))
    assert response.status_code == 302 and "login" in response["Location"]


def test_the_connection_pages_show_health_and_its_last_check(client, trio, alias):
    from django.utils import timezone

    from providers.models import ProviderConnection

    main = ProviderConnection.objects.get(tenant=trio.acme, name="Main")
    ProviderConnection.objects.filter(pk=main.pk).update(
        health_status="failing",
        health_message="the provider of connection 'Main' is unavailable",
        last_checked_at=timezone.now(),
    )
    login(client, trio.alice)
    for page in (url("connections"), url("connection_edit", pk=main.pk)):
        body = client.get(page).content.decode()
        assert "Failing" in body and "is unavailable" in body and "checked" in body
