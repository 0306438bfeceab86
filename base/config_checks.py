"""A tenant's configuration is checked as a whole on every save of one of its objects.

The objects a configuration document holds (provider connections, tool definitions,
agents, crews, knowledge bases, MCP server connections) live in several apps below the
one that compiles the whole graph (agents: `agents/runtime/config/compiler.py`). So the
models take the `ConfigObject` mixin, whose `full_clean()` — run by every write: the
services (REST, the configuration pages, the import), the admin's model forms — asks the
checks registered here, once the object itself is valid; the agents app registers the
compiler's check at startup (`AgentsConfig.ready`).

A caller that has compiled the end state of several changes itself (the document import,
whose changes must not depend on their order) sets `graph_checked = True` on the instance.
A caller below agents that saves several objects at once (the OpenAPI tool import) asks
`problems_saving_together` instead: one compile of the end state, not one per save.

Deleting one is asked the same way: `ConfigObject.delete()` (every face's deletion: the
services behind REST, the pages and the document import, the admin's delete view) and
`refusals_to_delete` (the admin's confirmation page and bulk action) ask the registered
delete checks, so another app may refuse it (agents: a workflow names this tool or agent)
without this object's app importing it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.core.exceptions import ValidationError

# (the object being saved, the fields its form leaves out, the fields already in error)
# -> None, or ValidationError
ConfigCheck = Callable[[Any, frozenset[str], frozenset[str]], None]
_checks: list[ConfigCheck] = []


# (the object about to be deleted) -> why it may not be (each a sentence), or []
DeleteCheck = Callable[[Any], list[str]]
_delete_checks: list[DeleteCheck] = []


def register_delete_check(check: DeleteCheck) -> None:
    """Ask `check` before every deletion of a `ConfigObject` (once per check)."""
    if all(known is not check for known in _delete_checks):
        _delete_checks.append(check)


def refusals_to_delete(instance: Any) -> list[str]:
    """Why `instance` may not be deleted (the registered checks' sentences), or []."""
    return [reason for check in _delete_checks for reason in check(instance)]


# (objects of one tenant to be saved together, each valid on its own) -> the problems
# saving them all adds to the tenant's configuration: (index of the object a problem is
# in, or None for another object's, a sentence)
GroupCheck = Callable[[Sequence[Any]], list[tuple[int | None, str]]]
_group_checks: list[GroupCheck] = []


def register_group_check(check: GroupCheck) -> None:
    """Ask `check` about objects saved together (once per check)."""
    if all(known is not check for known in _group_checks):
        _group_checks.append(check)


def problems_saving_together(instances: Sequence[Any]) -> list[tuple[int | None, str]] | None:
    """The registered checks' problems with the end state in which every one of
    `instances` is saved; the caller then saves each with `graph_checked = True`. None
    when no check is registered: each save must then check itself."""
    if not _group_checks:
        return None
    return [problem for check in _group_checks for problem in check(instances)]


def register_config_check(check: ConfigCheck) -> None:
    """Run `check` on every full_clean of a `ConfigObject` (once per check)."""
    if all(known is not check for known in _checks):
        _checks.append(check)


class ConfigObject:
    """Mixin for a model a configuration document holds; put it before `models.Model`."""

    graph_checked: bool = False  # True: the caller compiled the tenant's end state itself

    def full_clean(
        self,
        exclude: Iterable[str] | None = None,
        validate_unique: bool = True,
        validate_constraints: bool = True,
    ) -> None:
        """The model's own validation, then the registered checks — also when the first
        found errors, so every problem is shown at once (a check leaves the fields already
        in error alone)."""
        errors: dict[str, list[Any]] = {}
        try:
            super().full_clean(  # type: ignore[misc]
                exclude=exclude,
                validate_unique=validate_unique,
                validate_constraints=validate_constraints,
            )
        except ValidationError as exc:
            if self.graph_checked:
                raise
            errors = exc.update_error_dict(errors)
        if self.graph_checked:
            return
        left_out, failed = frozenset(exclude or ()), frozenset(errors)
        for check in _checks:
            try:
                check(self, left_out, failed)
            except ValidationError as exc:
                errors = exc.update_error_dict(errors)
        if errors:
            raise ValidationError(errors)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        """ValidationError, and nothing deleted, when a registered check refuses it."""
        if refused := refusals_to_delete(self):
            raise ValidationError(refused)
        return super().delete(*args, **kwargs)  # type: ignore[misc]
