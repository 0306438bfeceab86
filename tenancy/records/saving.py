"""Saving a model through its own validation, the way every write service of the apps does.

`save_validated` applies changes, runs the model's `full_clean()` (its fields, rules and
constraints) and saves, all in one transaction. A Django ValidationError from the model
passes through unchanged; a unique constraint lost to a concurrent write (an
IntegrityError) becomes SaveConflict, which the API answers with 409.

`save_validated` and `delete_recorded` record the change in the tenant's audit log in the
same transaction (before/after values, secrets masked; data models such as conversations
are not logged), and a save of a versioned object its new version
(tenancy/records/history.py): `actor` names who acts, else the request being served
does (see tenancy/records/audit.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import IntegrityError, models, transaction

from tenancy.records import audit, history

M = TypeVar("M", bound=models.Model)

CONFLICT_MESSAGE = "It changed meanwhile (a duplicate name or slug); retry."


class SaveConflict(Exception):
    """A concurrent write won a unique constraint (a duplicate name or slug)."""

    def __init__(self, message: str = CONFLICT_MESSAGE) -> None:
        super().__init__(message)


def save_validated(
    instance: M,
    changes: dict[str, Any],
    *,
    before: Callable[[M], None] | None = None,
    after: Callable[[M], None] | None = None,
    actor: Any = None,
) -> M:
    """Set `changes`, then `before`, full_clean, save and `after` in one transaction."""
    if "tenant" in changes or "tenant_id" in changes:
        raise ValueError("The tenant is the service's `tenant`, not a change.")
    for name, value in changes.items():
        setattr(instance, name, value)
    try:
        with transaction.atomic():
            stored = audit.stored_state(instance)
            if before is not None:
                before(instance)
            instance.full_clean()
            instance.save()
            if after is not None:
                after(instance)
            audit.record_saved(instance, stored, actor=actor)
            history.record(instance, actor=actor)
    except IntegrityError:
        raise SaveConflict() from None
    return instance


def delete_recorded(instance: models.Model, *, actor: Any = None) -> None:
    """Delete `instance`, recorded in the audit log in the same transaction."""
    with transaction.atomic():
        audit.record_deleted(instance, actor=actor)
        instance.delete()
