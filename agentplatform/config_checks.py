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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

# (the object being saved, the fields its form leaves out) -> None, or ValidationError
ConfigCheck = Callable[[Any, frozenset[str]], None]
_checks: list[ConfigCheck] = []


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
        super().full_clean(  # type: ignore[misc]
            exclude=exclude,
            validate_unique=validate_unique,
            validate_constraints=validate_constraints,
        )
        if self.graph_checked:
            return
        left_out = frozenset(exclude or ())
        for check in _checks:
            check(self, left_out)
