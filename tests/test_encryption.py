from __future__ import annotations

import io

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from tests.scoping.models import Project

INLINE = {f"ticket_set-{k}": v for k, v in [("TOTAL_FORMS", "0"), ("INITIAL_FORMS", "0")]}
OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def raw_token(project: Project) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT token FROM scoping_project WHERE id = %s", [project.pk])
        return cursor.fetchone()[0]


def test_the_column_holds_ciphertext_never_plaintext(trio):
    project = Project.objects.create(tenant=trio.acme, name="p", token="sk-live-123")
    stored = raw_token(project)
    assert "sk-live-123" not in stored
    newest = Fernet(settings.FIELD_ENCRYPTION_KEYS[0])
    assert newest.decrypt(stored.encode()) == b"sk-live-123"
    assert Project.objects.get(pk=project.pk).token == "sk-live-123"


def test_null_stays_null_and_empty_is_encrypted_too(trio):
    empty = Project.objects.create(tenant=trio.acme, name="e", token="")
    none = Project.objects.create(tenant=trio.acme, name="n", token=None)
    assert raw_token(none) is None
    assert raw_token(empty) != ""
    assert Project.objects.get(pk=empty.pk).token == ""


def test_it_decrypts_after_rotation_and_reencrypt_moves_to_the_new_key(trio):
    with override_settings(FIELD_ENCRYPTION_KEYS=[OLD]):
        project = Project.objects.create(tenant=trio.acme, name="p", token="s3cret")
        Project.objects.create(tenant=trio.acme, name="n", token=None)
    with override_settings(FIELD_ENCRYPTION_KEYS=[NEW, OLD]):
        assert Project.objects.get(pk=project.pk).token == "s3cret"
        call_command("reencrypt_secrets", stdout=io.StringIO())
        assert Fernet(NEW).decrypt(raw_token(project).encode()) == b"s3cret"
    with override_settings(FIELD_ENCRYPTION_KEYS=[NEW]):  # the old key can go now
        assert Project.objects.get(pk=project.pk).token == "s3cret"


def test_a_dropped_key_is_a_clear_configuration_error(trio):
    with override_settings(FIELD_ENCRYPTION_KEYS=[OLD]):
        project = Project.objects.create(tenant=trio.acme, name="p", token="s3cret")
    with (
        override_settings(FIELD_ENCRYPTION_KEYS=[NEW]),
        pytest.raises(ImproperlyConfigured, match="reencrypt_secrets"),
    ):
        Project.objects.get(pk=project.pk)


def test_encrypted_values_cannot_be_searched(trio):
    with pytest.raises(Exception, match="Unsupported lookup"):
        list(Project.objects.filter(token="s3cret"))
    assert list(Project.objects.filter(token__isnull=True)) == []


def test_admin_forms_never_render_a_stored_secret_and_blank_keeps_it(client, trio):
    from tests.factories import login

    project = Project.objects.create(tenant=trio.acme, name="p", token="sk-live-123")
    login(client, trio.alice)
    page = client.get(f"/admin/scoping/project/{project.pk}/change/").content.decode()
    assert 'type="password"' in page and "sk-live-123" not in page
    client.post(
        f"/admin/scoping/project/{project.pk}/change/", {"name": "renamed", "token": "", **INLINE}
    )
    project.refresh_from_db()
    assert (project.name, project.token) == ("renamed", "sk-live-123")
    client.post(
        f"/admin/scoping/project/{project.pk}/change/", {"name": "p", "token": "sk-new", **INLINE}
    )
    project.refresh_from_db()
    assert project.token == "sk-new"
