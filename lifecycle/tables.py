"""Which tables hold a tenant's rows, found from the models (never a hand-kept list).

Every tenant-owned model has a `tenant` foreign key (docs/design.md, "Tenancy and security";
the row-level security policies are installed on exactly those tables, `tenancy.rls`). A
few rows outside them belong to a tenant through one of its objects: django-guardian's
object permissions and the admin's log entries (by content type and object id), and the
auth groups behind its TenantGroups. `erasure` and `export` both walk this list.
"""

from __future__ import annotations

from django.apps import apps
from django.db import models

from base.encryption import EncryptedTextField


def _has_tenant_key(model: type[models.Model]) -> bool:
    return any(
        field.name == "tenant"
        and field.many_to_one
        and field.related_model._meta.label_lower == "tenancy.tenant"
        for field in model._meta.get_fields()
    )


def tenant_models() -> list[type[models.Model]]:
    """The models with a tenant key, each before the models its rows point at (a row is
    deleted before what it references, so a batch cascades to little); cycles (a
    conversation's leaf message) are broken arbitrarily: the deletion's collector follows
    them within a batch."""
    owned = [m for m in apps.get_models() if _has_tenant_key(m)]
    owned.sort(key=lambda m: m._meta.label_lower)  # a stable order run after run
    labels = {m._meta.label_lower: m for m in owned}
    ordered: list[type[models.Model]] = []
    state: dict[str, str] = {}

    def visit(model: type[models.Model]) -> None:
        label = model._meta.label_lower
        if state.get(label):
            return
        state[label] = "visiting"
        for other in owned:  # what points at `model` goes first
            if other is model:
                continue
            for field in other._meta.concrete_fields:
                target = getattr(field, "related_model", None)
                if field.is_relation and target is not None and target._meta.label_lower == label:
                    visit(labels[other._meta.label_lower])
        state[label] = "done"
        ordered.append(model)

    for model in owned:
        visit(model)
    return ordered


def secret_fields(model: type[models.Model]) -> set[str]:
    """The fields an export leaves out: encrypted at rest (credentials, tokens, secrets)
    and the stored hashes of keys and codes."""
    names = set()
    for field in model._meta.concrete_fields:
        if isinstance(field, EncryptedTextField) or field.name.endswith("_hash"):
            names.add(field.name)
    return names
