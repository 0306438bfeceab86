"""Secrets at rest: a model field that stores Fernet tokens, never plaintext.

Keys come from settings.FIELD_ENCRYPTION_KEYS (newest first). Encryption always uses
the newest key; decryption tries each, so keys rotate by prepending a new one and
running `manage.py reencrypt_secrets`, after which the old key can be dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django import forms
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models, transaction
from django.db.models.query_utils import DeferredAttribute


@lru_cache(maxsize=4)
def _multi_fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def fernet() -> MultiFernet:
    """The MultiFernet for the current settings (cached per key list, so tests may override)."""
    return _multi_fernet(tuple(settings.FIELD_ENCRYPTION_KEYS))


def encrypt(plaintext: str) -> str:
    return fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ImproperlyConfigured(
            "A stored secret cannot be decrypted with FIELD_ENCRYPTION_KEYS; "
            "was a key dropped before `manage.py reencrypt_secrets` ran?"
        ) from None


_ASSIGNED = "_secrets_assigned"  # instance.__dict__ key: secrets set since load or save


class _TrackedSecret(DeferredAttribute):
    """Records that a secret was assigned on a stored object (a loaded row's own values,
    set while `_state.adding` is still True, do not count). See `secret_assigned`."""

    def __set__(self, instance, value) -> None:
        instance.__dict__[self.field.attname] = value
        if not instance._state.adding:
            # A new frozenset each time: copies of an instance never share it.
            set_assigned_secrets(instance, assigned_secrets(instance) | {self.field.attname})


def assigned_secrets(instance: models.Model) -> frozenset[str]:
    """The secrets set on this stored object since it was loaded or last saved (a new
    object's count as set: see `secret_assigned`)."""
    return instance.__dict__.get(_ASSIGNED, frozenset())


def set_assigned_secrets(instance: models.Model, names: frozenset[str]) -> None:
    """For the model's own bookkeeping: after a save or refresh, or around Django's
    `clean_fields`, which sets every field to its cleaned value."""
    instance.__dict__[_ASSIGNED] = names


def secret_assigned(instance: models.Model, name: str) -> bool:
    """Whether secret `name` was entered (a new value or a clearing) in this change."""
    return instance._state.adding or name in assigned_secrets(instance)


class EncryptedTextField(models.TextField):
    """Text encrypted with Fernet in the database. Not searchable: only isnull lookups."""

    description = "Text encrypted at rest"
    descriptor_class = _TrackedSecret

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return None if value is None else encrypt(str(value))

    def from_db_value(self, value, expression, connection):
        return None if value is None else decrypt(value)

    def get_lookup(self, lookup_name):
        return super().get_lookup(lookup_name) if lookup_name == "isnull" else None

    def formfield(self, **kwargs):
        """Write-only in forms: the stored value is never rendered back (this widget wins
        over any other, e.g. the admin's textarea)."""
        defaults = {
            "form_class": forms.CharField,
            "widget": forms.PasswordInput(render_value=False),
            "required": False,
            "help_text": "Write-only. Leave blank to keep the current value.",
        }
        return super(models.TextField, self).formfield(**{**kwargs, **defaults})

    def save_form_data(self, instance, data) -> None:
        if data not in (None, ""):  # blank keeps what is stored
            super().save_form_data(instance, data)


def encrypted_fields() -> Iterator[tuple[type[models.Model], list[str]]]:
    for model in apps.get_models():
        names = [f.name for f in model._meta.concrete_fields if isinstance(f, EncryptedTextField)]
        if names:
            yield model, names


def reencrypt_all(batch_size: int = 500) -> dict[str, int]:
    """Rewrite every encrypted value with the newest key. Returns rows rewritten per model.

    Reads ciphertext raw (no decryption into Python objects) and rotates each token;
    each batch commits on its own, so a crash leaves a mix that still decrypts.
    """
    rotated: dict[str, int] = {}
    for model, names in encrypted_fields():
        table = model._meta.db_table
        pk = model._meta.pk.column
        columns = [model._meta.get_field(name).column for name in names]
        count = 0
        last_pk = None
        while True:
            with transaction.atomic():
                queryset = model._base_manager.order_by("pk")
                if last_pk is not None:
                    queryset = queryset.filter(pk__gt=last_pk)
                pks = list(queryset.values_list("pk", flat=True)[:batch_size])
                if not pks:
                    break
                count += _rotate_rows(table, pk, columns, pks)
                last_pk = pks[-1]
        rotated[model._meta.label] = count
    return rotated


def _rotate_rows(table: str, pk: str, columns: list[str], pks: list) -> int:
    from django.db import connection

    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {qn(pk)}, {', '.join(qn(c) for c in columns)} FROM {qn(table)} "  # noqa: S608
            f"WHERE {qn(pk)} = ANY(%s) FOR UPDATE",
            [pks],
        )
        rows = cursor.fetchall()
        multi = fernet()
        for row in rows:
            tokens = [
                None if value is None else multi.rotate(value.encode()).decode()
                for value in row[1:]
            ]
            assignments = ", ".join(f"{qn(c)} = %s" for c in columns)
            cursor.execute(
                f"UPDATE {qn(table)} SET {assignments} WHERE {qn(pk)} = %s",  # noqa: S608
                [*tokens, row[0]],
            )
    return len(rows)
