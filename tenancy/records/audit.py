"""Recording the audit log: one `record` every hook calls, and what the hooks share.

Where entries come from (docs/audit-log.md lists them all):
- configuration saves and deletes: `tenancy.records.saving.save_validated` and
  `delete_recorded`, and the tenant-scoped admin (`record_saved` / `record_deleted`);
- members, API keys, approvals, runs started with a key: their services call `record`;
- sign-ins and guardian object permissions: receivers in `audit_receivers.py`.

Who acted: the caller passes `actor` where it knows it (a service's `by`, `initiated_by`,
`created_by`, the admin's request). Where it does not — the configuration services have no
actor parameter, and threading one through every view, serializer and admin would change
some twenty call sites — the actor and address come from the request being served,
which `AuditContextMiddleware` remembers for its duration (a context variable, read only
here and only for the log: never for a permission decision). Outside a request (Celery,
management commands) the actor is "system".

Writes go in the caller's transaction: a rolled-back change leaves no entry. A fault in
building an entry (an odd value, a broken __str__) is logged and the caller carries on;
a database error is not swallowed (inside the caller's transaction it could not be).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.contrib.auth.models import AbstractBaseUser
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, models
from django.http import HttpRequest, HttpResponse

from base.encryption import EncryptedTextField
from tenancy.models import ApiKey, AuditAction, AuditEntry, Membership, Tenant

log = logging.getLogger(__name__)

SET, CHANGED, CLEARED = "[set]", "[changed]", "[cleared]"
REDACTED = "[redacted]"
SYSTEM = "system"

# Data, not configuration: their saves and deletes are never logged.
NOT_CONFIGURATION = {
    "agents.conversation",
    "agents.message",
    "agents.fact",
    "agents.run",
    "agents.runevent",
    "agents.approval",
    "rag.document",
    "rag.chunk",
    "tenancy.auditentry",
}
# Fields whose values never enter the log, whatever their class (besides encrypted ones).
SECRET_NAME = re.compile(r"secret|password|token|api_?key|credential", re.IGNORECASE)
# Keys inside JSON values (headers, tool configs) whose values are masked.
SECRET_KEY = re.compile(
    r"authorization|cookie|secret|password|passwd|token|api[-_]?key|credential", re.IGNORECASE
)
# Housekeeping fields that change on every save.
SKIPPED_FIELDS = {"id", "tenant", "created_at", "updated_at"}


# -- the request being served ---------------------------------------------------------------
_request: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)


class AuditContextMiddleware:
    """Remembers the request for its duration, so deep writes know who acts (the user is
    read when an entry is recorded: DRF authenticates API keys inside the view). Sync and
    async, so it adds no thread switch under ASGI."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        token = _request.set(request)
        try:
            return await self.get_response(request)
        finally:
            _request.reset(token)


@contextmanager
def acting(request: HttpRequest | None) -> Iterator[None]:
    """As the middleware, for code that serves a request outside it (tests, MCP)."""
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)


# -- recording ------------------------------------------------------------------------------
def record(
    *,
    tenant: Tenant | int,
    action: str,
    actor: Any = None,
    obj: models.Model | None = None,
    changes: dict[str, Any] | None = None,
    request: HttpRequest | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEntry | None:
    """Append one entry (one INSERT). `actor`: a user, an ApiKey (or DRF's ApiClient), a
    label, or None for the request's. Returns None when the entry could not be built."""
    entry = unsaved_entry(
        tenant=tenant, action=action, actor=actor, obj=obj, changes=changes, request=request,
        details=details,
    )  # fmt: skip
    if entry is not None:
        entry.save(force_insert=True)
    return entry


def unsaved_entry(
    *,
    tenant: Tenant | int,
    action: str,
    actor: Any = None,
    obj: models.Model | None = None,
    changes: dict[str, Any] | None = None,
    request: HttpRequest | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEntry | None:
    """The entry `record` saves, not saved: for a writer that inserts it in a statement of
    its own (agents.runs.writer.insert_run). None when it could not be built."""
    try:
        request = request if request is not None else _request.get()
        entry = AuditEntry(
            tenant_id=tenant if isinstance(tenant, int) else tenant.pk,
            action=AuditAction(action),
            ip=_ip(request),
            changes=plain(changes or {}),
            details=plain(details or {}),
        )
        _set_actor(entry, actor, request)
        if obj is not None:
            entry.object_type = obj._meta.label_lower
            entry.object_id = text(obj.pk, 100)
            entry.object_repr = text(obj, 200)
    except Exception:  # a hook must not break the change it records
        log.exception("audit entry not recorded: %s", action)
        return None
    return entry


def record_grant(
    *,
    tenant: Tenant | int,
    added: bool,
    permission: str,
    obj: models.Model,
    grantee: Any,
    actor: Any = None,
) -> AuditEntry | None:
    """A per-object permission given (`added`) or taken away. `grantee`: a user or a group.
    Grants made with guardian's assign_perm/remove_perm are recorded already (see
    audit_receivers); call this for grants stored any other way."""
    kind = "group" if grantee.__class__.__name__ == "Group" else "user"
    return record(
        tenant=tenant,
        action=AuditAction.GRANT_ADDED if added else AuditAction.GRANT_REMOVED,
        actor=actor,
        obj=obj,
        details={"permission": permission, kind: text(grantee, 200), f"{kind}_id": grantee.pk},
    )


def record_api_key(
    key: ApiKey, action: str, *, actor: Any = None, reason: str = ""
) -> AuditEntry | None:
    """A key created or revoked: its name, prefix, scopes and expiry (never the secret); the
    key that made it; why the platform revoked it (`reason`)."""
    return record(
        tenant=key.tenant_id,
        action=action,
        actor=actor,
        obj=key,
        details={
            "name": key.name,
            "prefix": key.prefix,
            "scopes": list(key.scopes),
            "expires_at": key.expires_at,
            **({"acts_for_members": True} if key.acts_for_members else {}),
            **({"made_by_key": key.created_by_key_id} if key.created_by_key_id else {}),
            **({"reason": reason} if reason else {}),
        },
    )


def record_approval(approval: Any, by: Any) -> AuditEntry | None:
    """A decided Approval: the tool, the decision and the reason (not the arguments,
    which may hold anything the model wrote)."""
    return record(
        tenant=approval.tenant_id,
        action=AuditAction.APPROVAL_DECIDED,
        actor=by,
        obj=approval,
        details={
            "run": approval.run_id,
            "tool": approval.tool_name,
            "decision": approval.status,
            "reason": approval.reason,
            "arguments_edited": approval.edited_arguments is not None,
        },
    )


def run_started_entry(run: Any, api_key: ApiKey) -> AuditEntry | None:
    """The entry of a run started with an API key (which agent or crew, and the run), not
    saved: the run's writer inserts it with the run (agents.runs.writer.insert_run), which
    fills in the run's id (`object_id`, `object_repr`, `details["run"]`) once it has one."""
    target = run.agent or run.crew
    return unsaved_entry(
        tenant=run.tenant_id,
        action=AuditAction.RUN_STARTED_BY_KEY,
        actor=api_key,
        obj=run,
        details={
            "run": run.pk,
            "agent": run.agent.slug if run.agent else None,
            "crew": run.crew.slug if run.crew else None,
            "name": str(target) if target else "",
        },
    )


def set_actor(target: Any, actor: Any = None, request: HttpRequest | None = None) -> None:
    """Set `user`, `api_key` and `actor_label` of `target` (an entry, a configuration
    version) as `record` does: `actor`, else the request being served, else "system"."""
    _set_actor(target, actor, request if request is not None else _request.get())


def _set_actor(entry: Any, actor: Any, request: HttpRequest | None) -> None:
    if actor is None and request is not None:
        actor = getattr(request, "user", None)
    actor = getattr(actor, "api_key", actor)  # DRF's ApiClient acts for its key
    if isinstance(actor, ApiKey):
        entry.api_key = actor
        entry.actor_label = text(f"API key {actor.name} ({actor.prefix})", 200)
    elif isinstance(actor, AbstractBaseUser) and actor.is_authenticated:
        entry.user = actor
        entry.actor_label = text(actor.get_username(), 200)
    elif isinstance(actor, str) and actor:
        entry.actor_label = text(actor, 200)
    else:
        entry.actor_label = SYSTEM if request is None else "anonymous"


def _ip(request: HttpRequest | None) -> str | None:
    address = request.META.get("REMOTE_ADDR") if request is not None else None
    try:
        return str(ipaddress.ip_address(address)) if address else None
    except ValueError:
        return None


# -- configuration: before/after, secrets masked -----------------------------------------------
def is_audited(model: type[models.Model]) -> bool:
    """A tenant's configuration (agents, crews, tools, connections, knowledge bases, ...),
    its members and API keys: tenant-owned and not one of the data models."""
    if model._meta.label_lower in NOT_CONFIGURATION:
        return False
    return any(f.name == "tenant" and f.related_model is Tenant for f in model._meta.fields)


def config_fields(model: type[models.Model]) -> list[models.Field]:
    """What a person configures: editable fields (not versions, health or caches the
    platform keeps itself), without the id, tenant and timestamps."""
    return [
        f
        for f in [*model._meta.concrete_fields, *model._meta.many_to_many]
        if f.editable and f.name not in SKIPPED_FIELDS
    ]


def stored_state(instance: models.Model) -> dict[str, Any] | None:
    """The row as stored, for `record_saved`: None for a new one. One query (and one per
    many-to-many field) for an audited model, none otherwise."""
    model = type(instance)
    if instance.pk is None or not is_audited(model):
        return None
    row = model._base_manager.filter(pk=instance.pk).first()
    return None if row is None else _state(row)


def record_saved(
    instance: models.Model,
    stored: dict[str, Any] | None,
    *,
    actor: Any = None,
    request: HttpRequest | None = None,
) -> AuditEntry | None:
    """After saving `instance`: `config.created` (every field `[null, value]`) or
    `config.changed` (the fields that differ from `stored`); members get `member.*`.
    Nothing for data models, and nothing when no field changed."""
    model = type(instance)
    if not is_audited(model):
        return None
    created = stored is None
    changes = diff(model, stored or {}, _state(instance), created=created)
    if not changes and not created:
        return None
    if model is Membership:
        action = AuditAction.MEMBER_ADDED if created else AuditAction.MEMBER_CHANGED
    else:
        action = AuditAction.CONFIG_CREATED if created else AuditAction.CONFIG_CHANGED
    return record(
        tenant=instance.tenant_id,
        action=action,
        actor=actor,
        obj=instance,
        changes=changes,
        request=request,
    )


def record_deleted(
    instance: models.Model,
    *,
    actor: Any = None,
    request: HttpRequest | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEntry | None:
    """Before deleting `instance` (its pk is still there): `config.deleted` with the values
    it had (secrets masked), `member.removed` for a membership (`details`: what went with
    it, such as the keys it revoked)."""
    model = type(instance)
    if not is_audited(model):
        return None
    changes = {
        name: [before, None]
        for name, (before, _) in diff(model, _state(instance), {}, created=False).items()
    }
    action = AuditAction.MEMBER_REMOVED if model is Membership else AuditAction.CONFIG_DELETED
    return record(
        tenant=instance.tenant_id,
        action=action,
        actor=actor,
        obj=instance,
        changes=changes,
        request=request,
        details=details,
    )


def snapshot(instance: models.Model) -> dict[str, Any]:
    """The field values `record_saved` compares, taken from the instance in memory (one
    query per many-to-many field)."""
    return _state(instance)


def _state(instance: models.Model) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for field in config_fields(type(instance)):
        if field.many_to_many:
            state[field.name] = (
                sorted(getattr(instance, field.name).values_list("pk", flat=True))
                if instance.pk is not None
                else []
            )
        else:
            state[field.name] = getattr(instance, field.attname)
    return state


def diff(
    model: type[models.Model], before: dict[str, Any], after: dict[str, Any], *, created: bool
) -> dict[str, list[Any]]:
    """`{field: [before, after]}` of the fields that differ (all of them when `created`),
    secrets shown as "[set]" / "[changed]" / "[cleared]" and never as values."""
    changes: dict[str, list[Any]] = {}
    for field in config_fields(model):
        old, new = before.get(field.name), after.get(field.name)
        if not created and old == new:
            continue
        if created and new in (None, "", [], {}):
            continue  # a new row's empty fields say nothing
        if is_secret(field):
            changes[field.name] = _masked(old, new)
        else:
            changes[field.name] = [scrub(old), scrub(new)]
    return changes


def is_secret(field: models.Field) -> bool:
    return isinstance(field, EncryptedTextField) or bool(SECRET_NAME.search(field.name))


def _masked(old: Any, new: Any) -> list[str | None]:
    had, has = old not in (None, ""), new not in (None, "")
    if not has:
        return [SET if had else None, CLEARED if had else None]
    return [SET, CHANGED] if had else [None, SET]


def scrub(value: Any) -> Any:
    """`value` with the values under secret-looking keys of any nested object masked."""
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and SECRET_KEY.search(k) else scrub(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


# -- values the database stores -------------------------------------------------------------
def text(value: Any, limit: int) -> str:
    """str(value) without NUL (Postgres text refuses it) or lone surrogates, cut to `limit`."""
    result = str(value).replace("\x00", "")
    return result.encode("utf-8", "replace").decode("utf-8")[:limit]


def plain(value: Any, depth: int = 0) -> Any:
    """`value` as JSON Postgres stores: text cleaned, dates ISO, models as their pk,
    NaN as text, anything else as its str; nesting cut at 20 levels."""
    if depth > 20:
        return "…"
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return text(value, 10_000)
    if isinstance(value, dict):
        return {text(k, 200): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [plain(v, depth + 1) for v in items]
    if isinstance(value, models.Model):
        return value.pk
    if isinstance(value, datetime | date | time | timedelta | Decimal | UUID):
        return DjangoJSONEncoder().default(value)
    return text(value, 10_000)


# -- tenant deletion ----------------------------------------------------------------------------
def allow_purge(tenant_id: int) -> None:
    """Let this transaction delete `tenant_id`'s entries (the trigger of migration 0002
    refuses other deletes). Called by the Tenant pre_delete receiver, which Django's
    deletion runs inside the deletion's own transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('app.audit_purge_tenants', "
            "concat_ws(',', nullif(current_setting('app.audit_purge_tenants', true), ''), %s), "
            "true)",
            [str(tenant_id)],
        )
