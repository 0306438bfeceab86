"""How `manage.py migrate` applies migrations forwards: Django's MigrationExecutor, with each
operation given the historical models it acts on, rendered for it alone.

Django keeps one registry of historical models rendered through a whole migrate and, after
each operation changes the state, renders again the changed model and every model related
to it, recursively. Here every tenant table points at Tenant, so that is nearly every model,
for each of some 250 operations: 11 of the 13 s of CPU that `migrate` on an empty database
took (the first `make run`, each test database template, a restore). Instead, each operation
of a kind listed in `_LOCAL` gets registries of its model and what that points to (about 8
models), rendered from the states before and after it when it first asks for them; any
other operation (RunPython, RunSQL, a rename, a changed primary key or unique field, a kind
of our own or a library's) gets the whole state before and after it, each rendered afresh
only if it asks, as Django renders it for the first migration. Either way the models are
renders of the same model states as Django's, so the schema is the same; what a `_LOCAL`
operation reads of its models was checked against Django's source for the release in
`REVIEWED_FOR`, and the whole history's SQL and `pg_dump --schema-only` compared with
Django's executor's on it. On any other release (a patch release included) Django's executor
runs as it is, until someone repeats that review and comparison and moves `REVIEWED_FOR`.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cached_property, partial
from typing import TYPE_CHECKING

import django
from django.db import transaction
from django.db.migrations import operations
from django.db.migrations.executor import MigrationExecutor as DjangoMigrationExecutor
from django.db.migrations.operations.models import ModelOperation
from django.db.migrations.state import ProjectState, StateApps
from django.db.migrations.utils import resolve_relation

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from django.db.migrations import Migration
    from django.db.migrations.operations.base import Operation

REVIEWED_FOR = "5.2.19"  # django.get_version()

ModelKey = tuple[str, str]

# Operations whose database_forwards reads only its own model from the states (and through
# it, the models its fields point to), in Django 5.2: they leave reverse relations alone.
_LOCAL = (
    operations.CreateModel,
    operations.AddField,
    operations.AddIndex,
    operations.RemoveIndex,
    operations.AddConstraint,
    operations.RemoveConstraint,
    operations.AlterConstraint,
    operations.AlterUniqueTogether,
    operations.AlterModelOptions,
)


class MigrationExecutor(DjangoMigrationExecutor):
    # The state after the last operation applied, as that operation read it: its models,
    # if it rendered them, serve the next operation's state before, unless it needs more.
    _last: _RenderedFor | None = None

    def _migrate_all_forwards(self, state, plan, full_plan, fake, fake_initial):
        """Django's, less its render of every model before the first migration (and its
        progress callback's "Rendering model states"): the operations render their own."""
        state.__dict__.pop("apps", None)  # a rendered registry would be re-rendered per change
        self._last = None
        to_run = {migration for migration, _ in plan}
        for migration, _ in full_plan:
            if not to_run:
                break
            if migration in to_run:
                state = self.apply_migration(state, migration, fake=fake, fake_initial=fake_initial)
                to_run.remove(migration)
        return state

    def apply_migration(self, state, migration, fake=False, fake_initial=False):
        """Django's (the record, fake and fake_initial, the progress callback), with the
        migration's operations applied by `apply_operations`."""
        self._last = None  # (a faked migration moves no state)
        migration.apply = partial(self.apply_operations, migration)  # shadows Migration.apply
        try:
            return super().apply_migration(state, migration, fake=fake, fake_initial=fake_initial)
        finally:
            del migration.apply

    def apply_operations(
        self, migration: Migration, state: ProjectState, schema_editor, collect_sql=False
    ) -> ProjectState:
        """Migration.apply: each operation's state change, then its database change, atomic
        as Django makes it (or, with `collect_sql`, its SQL written down as Django writes
        it); `state` (unrendered) is advanced in place and returned."""
        app_label = migration.app_label
        collected = schema_editor.collected_sql if collect_sql else []
        for operation in migration.operations:
            if collect_sql:
                collected += ["--", f"-- {operation.describe()}", "--"]
                if not operation.reduces_to_sql:
                    collected.append("-- THIS OPERATION CANNOT BE WRITTEN AS SQL")
                    continue
            written = len(collected)
            before, after = self._states_around(operation, app_label, state)
            operation.state_forwards(app_label, state)
            atomic = operation.atomic or (migration.atomic and operation.atomic is not False)
            if not schema_editor.atomic_migration and atomic:
                with transaction.atomic(schema_editor.connection.alias):
                    operation.database_forwards(app_label, schema_editor, before, after)
            else:
                operation.database_forwards(app_label, schema_editor, before, after)
            if collect_sql and len(collected) == written:
                collected.append("-- (no-op)")
            self._last = after
        return state

    def _states_around(
        self, operation: Operation, app_label: str, state: ProjectState
    ) -> tuple[ProjectState, ProjectState]:
        """The states before and after `operation` as it reads them, taken before its state
        change: the one before holds copies of the models it may read; the one after shares
        `state`'s, which the state change is about to advance. Nothing is rendered until the
        operation asks, and the state before renders nothing if the last operation's state
        after has what it needs."""
        key = _model_key(operation, app_label)
        if key is None or not _is_local(operation, key, state):
            before = _RenderedFor(state.clone().models, state.real_apps, keys=None)
            after = _RenderedFor(state.models, state.real_apps, keys=None)
        else:
            keys = _pointed_to(state.models, [key])
            copies = {k: state.models[k].clone() for k in keys}
            before = _RenderedFor(copies, state.real_apps, [key])
            after = _RenderedFor(state.models, state.real_apps, [key])
        last = self._last
        if last is not None and last.rendered_covers(before):
            before.apps = last.apps
        return before, after


def _model_key(operation: Operation, app_label: str) -> ModelKey | None:
    if type(operation) not in _LOCAL and type(operation) is not operations.AlterField:
        return None
    if isinstance(operation, ModelOperation):  # CreateModel, the model options' kinds
        return app_label, operation.name_lower
    return app_label, operation.model_name_lower  # a field's, an index's, a constraint's


def _is_local(operation: Operation, key: ModelKey, state: ProjectState) -> bool:
    """An exact kind of `_LOCAL` (a subclass may read more); an AlterField only when neither
    its old field nor its new one is a primary key, unique (a foreign key's target: the
    schema editor alters the columns pointing at it) or many-to-many."""
    if type(operation) in _LOCAL:
        return True
    old = state.models[key].fields.get(operation.name)
    return old is not None and not any(
        field.primary_key or field.unique or field.many_to_many for field in (old, operation.field)
    )


class _RenderedFor(ProjectState):
    """A project state on `models` (the very dict: a state change to it shows) whose `apps`
    holds only the models of `keys` and those they point to (what rendering them needs), or
    every model if `keys` is None, rendered on first use."""

    def __init__(self, models: dict, real_apps: set[str], keys: list[ModelKey] | None) -> None:
        super().__init__(real_apps=real_apps)
        self.models = models  # (ProjectState would replace an empty dict with its own)
        self._keys = keys

    @cached_property
    def apps(self) -> StateApps:
        if self._keys is None:
            return StateApps(self.real_apps, self.models)
        self._rendered = _pointed_to(self.models, self._keys)
        return StateApps(self.real_apps, {key: self.models[key] for key in self._rendered})

    def rendered_covers(self, other: _RenderedFor) -> bool:
        """Whether this state's models, rendered already, include all `other` would render
        (when both are the same state)."""
        if "apps" not in self.__dict__:
            return False
        if self._keys is None:
            return True
        return other._keys is not None and _pointed_to(other.models, other._keys) <= self._rendered


def _pointed_to(models: dict, keys: Iterable[ModelKey]) -> set[ModelKey]:
    """`keys` and every model their fields and bases point to, recursively (those of
    `models`: a real app's are always rendered)."""
    found: set[ModelKey] = set()
    pending = list(keys)
    while pending:
        key = pending.pop()
        if key in found or key not in models:
            continue
        found.add(key)
        model = models[key]
        for field in model.fields.values():
            remote = field.remote_field
            if remote is None:
                continue
            pending.append(resolve_relation(remote.model, *key))
            if getattr(remote, "through", None) is not None:
                pending.append(resolve_relation(remote.through, *key))
        pending += [resolve_relation(base, *key) for base in model.bases if isinstance(base, str)]
    return found


@contextmanager
def used_by_migrate() -> Iterator[None]:
    """Inside, Django's migrate command applies migrations with this executor (it names
    MigrationExecutor as a global of its module); outside the reviewed Django version, it
    keeps Django's."""
    from django.core.management.commands import migrate

    if django.get_version() != REVIEWED_FOR:
        yield
        return
    migrate.MigrationExecutor = MigrationExecutor
    try:
        yield
    finally:
        migrate.MigrationExecutor = DjangoMigrationExecutor
