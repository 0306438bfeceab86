"""Configuration history: every saved state of a configured object as a numbered version,
and restoring one (docs/config-history.md).

Recorded on the one path every change takes: `tenancy.records.saving.save_validated` (all the
`*_save` services, so web, REST, the configuration document and the services), the
tenant-scoped admin (after its inlines, so a crew's members are in), and guardian's grant
signals (audit_receivers). Each `record` compares the object's snapshot with its latest
version and appends a version when they differ, in the caller's transaction.

A snapshot: `{"fields": {...}, "parts": {...}}`: the editable fields the audit log compares
(`audit.config_fields`; foreign keys as ids, many-to-many as id lists), secrets only as
"[set]" (or null), values under secret-looking JSON keys as "[redacted]"; and the parts an
app registers (a crew's members, who holds a use grant). So no secret is ever in a version,
its diff, the API or a page.

Which models are versioned and how one is restored is registered by their apps
(`register`, in `AppConfig.ready`): a restore goes through the app's own save service, so
the same validation and the compiler of the tenant's whole configuration
(agents/config_saves.py) judge it as a normal save, and it records a new version that says
which one it restored. Secrets keep their current value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import DatabaseError, models, transaction
from django.http import Http404, HttpRequest

from base import versions as shared_versions
from tenancy.models import ConfigVersion, Tenant
from tenancy.records import audit

log = logging.getLogger(__name__)

# (tenant, object, changes) -> the saved object, through the app's save service.
Restorer = Callable[[Tenant, Any, dict[str, Any]], Any]


@dataclass(frozen=True)
class Kind:
    """A versioned model: `name` as in URLs (`agents`), `noun` for people (`agent`)."""

    model: type[models.Model]
    name: str
    noun: str
    restore: Restorer
    parts: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    # part name -> (tenant, stored value) -> the service's argument; ValidationError if gone
    restore_parts: dict[str, Callable[[Tenant, Any], Any]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.model._meta.label_lower


_kinds: dict[str, Kind] = {}


def register(
    model: type[models.Model],
    *,
    name: str,
    noun: str,
    restore: Restorer,
    parts: dict[str, Callable[[Any], Any]] | None = None,
    restore_parts: dict[str, Callable[[Tenant, Any], Any]] | None = None,
) -> None:
    """Version `model` (called by its app's ready())."""
    kind = Kind(model, name, noun, restore, parts or {}, restore_parts or {})
    _kinds[kind.label] = kind


def kind_of(model: type[models.Model] | str) -> Kind | None:
    label = model if isinstance(model, str) else model._meta.label_lower
    return _kinds.get(label)


def kind_named(name: str) -> Kind:
    """The kind a URL names; an unknown one answers 404."""
    for kind in _kinds.values():
        if kind.name == name:
            return kind
    raise Http404("No such kind of object.")


def kinds() -> list[Kind]:
    return list(_kinds.values())


# -- snapshots ------------------------------------------------------------------------------
def snapshot(instance: models.Model) -> dict[str, Any]:
    """The object's editable state, secrets masked (one query per many-to-many field and
    what its parts read)."""
    kind = kind_of(type(instance))
    state = audit.snapshot(instance)
    fields: dict[str, Any] = {}
    for f in audit.config_fields(type(instance)):
        value = state.get(f.name)
        if audit.is_secret(f):
            fields[f.name] = audit.SET if value not in (None, "") else None
        else:
            fields[f.name] = audit.plain(audit.scrub(value))
    readers = kind.parts if kind else {}
    parts = {name: audit.plain(read(instance)) for name, read in readers.items()}
    return {"fields": fields, "parts": parts}


def flat(snap: dict[str, Any] | None) -> dict[str, Any]:
    """A snapshot's fields and parts as one mapping (parts never share a field's name)."""
    if not snap:
        return {}
    return {**snap.get("fields", {}), **snap.get("parts", {})}


def changes_between(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, list]:
    """`{name: [before, after]}` of what differs; for a first version, its non-empty values."""
    old, new = flat(before), flat(after)
    if before is None:
        return {k: [None, v] for k, v in new.items() if v not in (None, "", [], {})}
    return {k: [old.get(k), new.get(k)] for k in {**old, **new} if old.get(k) != new.get(k)}


# -- recording ------------------------------------------------------------------------------
@dataclass
class _Restoring:
    target: tuple[str, str]  # (label, pk) of the object being restored
    number: int
    actor: Any
    deferred: bool = True  # while its service saves (and grants change): one version after


_restoring: ContextVar[_Restoring | None] = ContextVar("history_restoring", default=None)


def record(
    instance: models.Model, *, actor: Any = None, request: HttpRequest | None = None
) -> ConfigVersion | None:
    """After a save of `instance` (in its transaction): a new version when its snapshot
    differs from the latest one. Two queries and an insert for a versioned model; nothing
    for others. A fault building the version is logged and the change goes on."""
    kind = kind_of(type(instance))
    if kind is None or instance.pk is None or getattr(instance, "tenant_id", None) is None:
        return None
    restoring = _restoring.get()
    if restoring is not None and restoring.target != (kind.label, str(instance.pk)):
        restoring = None  # another object saved on the way: an ordinary version
    if restoring is not None and restoring.deferred:
        return None  # `restore` records the end state once
    try:
        snap = snapshot(instance)
        latest = (
            ConfigVersion.objects.filter(
                tenant_id=instance.tenant_id, object_type=kind.label, object_id=str(instance.pk)
            )
            .order_by("-number")
            .first()
        )
        if latest is not None and latest.snapshot == snap:
            return None
        version = ConfigVersion(
            tenant_id=instance.tenant_id,
            object_type=kind.label,
            object_id=str(instance.pk),
            object_repr=audit.text(instance, 200),
            number=1 if latest is None else latest.number + 1,
            snapshot=snap,
            changes=changes_between(latest.snapshot if latest else None, snap),
            restored_from=restoring.number if restoring else None,
        )
        if actor is None and restoring is not None:
            actor = restoring.actor
        audit.set_actor(version, actor, request)
    except DatabaseError:
        raise  # the caller's transaction is broken: never swallowed
    except Exception:  # a fault building it (an odd value) must not break the change
        log.exception("configuration version not recorded: %s %s", kind.label, instance.pk)
        return None
    version.save(force_insert=True)
    _bump(instance.tenant_id)
    return version


def numbers_version(tenant_id: int) -> str:
    """Changes whenever the tenant's latest version numbers may have: what a process keeps
    of `latest_numbers` is current while this is."""
    return shared_versions.current(_numbers_key(tenant_id))


def _numbers_key(tenant_id: int) -> str:
    prefix = django_settings.CACHES["default"].get("KEY_PREFIX", "")
    return f"{prefix}:config-versions:version:{tenant_id}"


def _bump(tenant_id: int) -> None:
    """Now, for this transaction's own reads, and after the commit, for a process that
    read the numbers before it."""
    key = _numbers_key(tenant_id)
    shared_versions.bump(key)
    transaction.on_commit(lambda: shared_versions.bump(key))


def record_baselines(*, actor: str = "system (history baseline)") -> int:
    """A first version of every versioned object that has none yet (saved before history
    existed, or written past the services); returns how many. Idempotent. Costs a query
    per kind and a snapshot and insert per object recorded, each in its own transaction."""
    recorded = 0
    for kind in kinds():
        versioned = ConfigVersion.objects.filter(object_type=kind.label).values("object_id")
        missing = kind.model._base_manager.exclude(pk__in=_as_ids(versioned))
        for obj in missing.order_by("pk").iterator():
            with transaction.atomic():
                if record(obj, actor=actor) is not None:
                    recorded += 1
    return recorded


def _as_ids(object_ids: models.QuerySet) -> list[int]:
    return [int(row["object_id"]) for row in object_ids if row["object_id"].isdigit()]


# -- reading --------------------------------------------------------------------------------
def versions(tenant: Tenant, instance: models.Model) -> models.QuerySet[ConfigVersion]:
    """The object's versions, newest first (404 for another tenant's object)."""
    kind = _check(tenant, instance)
    return ConfigVersion.objects.filter(
        tenant=tenant, object_type=kind.label, object_id=str(instance.pk)
    ).order_by("-number")


def version_get(tenant: Tenant, instance: models.Model, number: Any) -> ConfigVersion:
    """One version of the object; a number it does not have answers 404."""
    try:
        number = int(str(number))
    except ValueError:
        raise Http404("No such version.") from None
    in_range = 0 < number < 2**31  # the column's range: beyond it, no such version
    found = versions(tenant, instance).filter(number=number).first() if in_range else None
    if found is None:
        raise Http404("No such version.")
    return found


def latest_numbers(tenant_id: int, objects: dict[str, list[int]]) -> dict[str, list[list[int]]]:
    """For a run: the latest version number of each object (`{label: [ids]}`), as
    `{label: [[id, number], ...]}`; objects without a version are left out. One query."""
    query = models.Q()
    for label, ids in objects.items():
        if ids:
            query |= models.Q(object_type=label, object_id__in=[str(i) for i in ids])
    if not query:
        return {}
    rows = (
        ConfigVersion.objects.filter(query, tenant_id=tenant_id)
        .order_by("object_type", "object_id", "-number")
        .distinct("object_type", "object_id")
        .values_list("object_type", "object_id", "number")
    )
    found: dict[str, list[list[int]]] = {}
    for label, object_id, number in rows:
        found.setdefault(label, []).append([int(object_id), number])
    return found


def versions_used(tenant_id: int, used: dict[str, Any]) -> list[ConfigVersion]:
    """The versions a run recorded (`Run.config_versions`), in kind order. One query; ids
    that are not pairs of numbers are skipped."""
    query = models.Q()
    for label, pairs in (used or {}).items():
        for pair in pairs if isinstance(pairs, list) else []:
            if isinstance(pair, list) and len(pair) == 2 and all(type(x) is int for x in pair):
                query |= models.Q(object_type=label, object_id=str(pair[0]), number=pair[1])
    if not query:
        return []
    order = {label: i for i, label in enumerate(_kinds)}
    found = ConfigVersion.objects.filter(query, tenant_id=tenant_id)
    return sorted(found, key=lambda v: (order.get(v.object_type, 99), v.object_repr))


def rows(version: ConfigVersion, *, named: bool = False) -> list[tuple[str, Any, Any]]:
    """The version's changes as (name, before, after), in the snapshot's order; `named`:
    related ids shown by name (see `named_values`)."""
    names = in_field_order(version, version.changes)
    found = [(name, *version.changes[name]) for name in names]
    if not named:
        return found
    befores = named_values(version, {name: before for name, before, _ in found})
    afters = named_values(version, {name: after for name, _, after in found})
    return [(name, befores[name], afters[name]) for name, _, _ in found]


def settings(version: ConfigVersion, *, named: bool = True) -> list[tuple[str, Any]]:
    """The version's whole state as (name, value), in the model's field order then parts."""
    values = flat(version.snapshot)
    if named:
        values = named_values(version, values)
    return [(name, values[name]) for name in in_field_order(version, values)]


def in_field_order(version: ConfigVersion, names: Any) -> list[str]:
    """`names` in the model's field order, then the rest (parts) by name; the stored JSON
    keeps no order of its own."""
    kind = kind_of(version.object_type)
    order = [f.name for f in audit.config_fields(kind.model)] if kind else []
    rank = {name: i for i, name in enumerate(order)}
    return sorted(names, key=lambda n: (rank.get(n, len(order)), n))


def named_values(version: ConfigVersion, values: dict[str, Any]) -> dict[str, Any]:
    """`values` (a snapshot's, by field name) with related ids as "Name (#id)", or
    "#id (deleted)", for people to read. One query per related field present."""
    kind = kind_of(version.object_type)
    if kind is None:
        return values
    related = {f.name: f for f in audit.config_fields(kind.model) if f.is_relation}
    shown = dict(values)
    for name, f in related.items():
        value = values.get(name)
        ids = value if isinstance(value, list) else [value]
        ids = [i for i in ids if isinstance(i, int)]
        if not ids:
            continue
        rows = _related(f, version.tenant_id).filter(pk__in=ids)
        names = {o.pk: audit.text(o, 200) for o in rows}
        labels = {i: f"{names[i]} (#{i})" if i in names else f"#{i} (deleted)" for i in ids}
        shown[name] = [labels[i] for i in ids] if isinstance(value, list) else labels[value]
    return shown


# -- restoring ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Proposed:
    """A restore its app's service held as a draft (an agent whose changes must pass an
    evaluation first: agents/publishing.py): no version yet; `draft` goes live, or not,
    as any change of it."""

    draft: Any
    restored_from: int


def proposed_text(proposed: Proposed, obj: Any) -> str:
    return (
        f"Version {proposed.restored_from} of “{obj}” is proposed as draft "
        f"{proposed.draft.pk}: it goes live when its evaluation passes."
    )


def restore(
    *, tenant: Tenant, instance: models.Model, number: Any, actor: Any = None
) -> ConfigVersion | Proposed:
    """Save `instance` as it was in version `number`, through its app's save service (the
    same validation and compiler as any save), recording a new version that names the one
    restored. Secrets keep their current value. ValidationError when the version cannot be
    applied now (it names an object since deleted, the compiler refuses it) or changes
    nothing; 404 for another tenant's object or a missing version. A service that drafts
    the change (it sets `pending_draft` on what it returns) makes it `Proposed`."""
    kind = _check(tenant, instance)
    version = version_get(tenant, instance, number)
    changes = restorable_changes(kind, tenant, instance, version.snapshot)
    state = _Restoring((kind.label, str(instance.pk)), version.number, actor)
    token = _restoring.set(state)
    try:
        with transaction.atomic():
            saved = kind.restore(tenant, instance, changes)
            state.deferred = False  # the end state (fields, members, grants) as one version
            restored = record(kind.model._base_manager.get(pk=instance.pk))
            draft = getattr(saved, "pending_draft", None)
            if draft is not None:
                return Proposed(draft, version.number)
            if restored is None:
                raise ValidationError(
                    f"Nothing to restore: this {kind.noun} has the settings of version "
                    f"{version.number} already."
                )
    finally:
        _restoring.reset(token)
    return restored


def restorable_changes(
    kind: Kind, tenant: Tenant, instance: models.Model, snap: dict[str, Any]
) -> dict[str, Any]:
    """The service's `changes` that bring `instance` back to `snap`: related objects looked
    up again in the tenant (gone: ValidationError naming them), secrets left out, masked
    JSON values taken from the current state."""
    stored = snap.get("fields", {})
    changes: dict[str, Any] = {}
    errors: dict[str, str] = {}
    current = audit.snapshot(instance)
    for f in audit.config_fields(type(instance)):
        if f.name not in stored or audit.is_secret(f):
            continue  # a field added since keeps its value; secrets are never restored
        value = stored[f.name]
        if f.many_to_many:
            ids = [int(v) for v in value or []]
            found = {o.pk: o for o in _related(f, tenant).filter(pk__in=ids)}
            if missing := [i for i in ids if i not in found]:
                errors[f.name] = _gone(f, missing)
            else:
                changes[f.name] = [found[i] for i in ids]
        elif f.is_relation:
            target = None if value is None else _related(f, tenant).filter(pk=value).first()
            if value is not None and target is None:
                errors[f.name] = _gone(f, [value])
            else:
                changes[f.name] = target
        else:
            changes[f.name] = unredact(value, current.get(f.name))
    for name, convert in kind.restore_parts.items():
        if name in snap.get("parts", {}):
            try:
                changes[name] = convert(tenant, snap["parts"][name])
            except ValidationError as exc:
                errors[name] = " ".join(exc.messages)
    if errors:
        raise ValidationError(errors)
    return changes


def unredact(value: Any, current: Any) -> Any:
    """`value` with each "[redacted]" replaced by the current value at its place (dropped
    when there is none): a restore keeps today's credentials inside JSON."""
    if isinstance(value, dict):
        now = current if isinstance(current, dict) else {}
        result = {}
        for key, item in value.items():
            if item == audit.REDACTED:
                if key in now:
                    result[key] = now[key]
            else:
                result[key] = unredact(item, now.get(key))
        return result
    if isinstance(value, list):
        now = current if isinstance(current, list) else []
        return [unredact(item, now[i] if i < len(now) else None) for i, item in enumerate(value)]
    return value


def _related(f: models.Field, tenant: Tenant | int) -> models.QuerySet:
    model = f.related_model
    manager = model._base_manager
    if any(g.name == "tenant" for g in model._meta.fields):
        return manager.filter(tenant_id=tenant if isinstance(tenant, int) else tenant.pk)
    return manager.all()


def _gone(f: models.Field, ids: list[Any]) -> str:
    what = f.related_model._meta.verbose_name
    listed = ", ".join(str(i) for i in ids)
    return (
        f"This version names a {what} that no longer exists (id {listed}); "
        "choose another in the editor instead."
    )


def _check(tenant: Tenant, instance: models.Model) -> Kind:
    kind = kind_of(type(instance))
    if kind is None:
        raise Http404("This object has no history.")
    if getattr(instance, "tenant_id", None) != tenant.pk:
        raise Http404(f"No such {kind.noun}.")
    return kind


# -- parts the apps share -----------------------------------------------------------------------
def grants_of(instance: models.Model) -> list[str]:
    """Who holds a per-object permission on `instance`, as sorted lines ("user alice:
    use_agent", "group Finance: use_agent"). Two queries."""
    from django.contrib.contenttypes.models import ContentType
    from guardian.models import GroupObjectPermission, UserObjectPermission

    content_type = ContentType.objects.get_for_model(type(instance))
    where = {"content_type": content_type, "object_pk": str(instance.pk)}
    users = UserObjectPermission.objects.filter(**where).values_list(
        "user__username", "permission__codename"
    )
    groups = GroupObjectPermission.objects.filter(**where).values_list(
        "group__name", "permission__codename"
    )
    lines = [f"user {name}: {code}" for name, code in users]
    lines += [f"group {_group_label(name)}: {code}" for name, code in groups]
    return sorted(lines)


def _group_label(name: str) -> str:
    # A tenant group's auth Group is named "<tenant id>:<name>": show the name.
    return name.split(":", 1)[-1] if ":" in name else name
