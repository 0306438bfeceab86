"""The rules of one quota's own values, without Django: its scope names exactly its one
target, and its limit fits its metric. `agents.models.Quota.clean` and the configuration
compiler both ask `quota_problems`, so a form, REST and a document agree (docs/quotas.md)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

SCOPES = ("tenant", "member", "api_key", "agent")
# The target each scope names (the model's field), and the noun a refusal uses.
TARGET_OF_SCOPE = {"member": "user", "api_key": "api_key", "agent": "agent"}
TARGETS = ("user", "api_key", "agent")
_NOUNS = {"user": "member", "api_key": "API key", "agent": "agent"}
# One limit per target, metric and period: the model's unique constraint says it, and so
# does quota_save when a concurrent save wins that constraint.
DUPLICATE_QUOTA_MESSAGE = (
    "This target already has a limit of that metric and period: change that one."
)


def quota_problems(
    *, scope: str, given: Mapping[str, bool], metric: str, limit: Decimal | None
) -> dict[str, str]:
    """By field (user, api_key, agent, limit): `given` says which targets are set."""
    wanted = TARGET_OF_SCOPE.get(scope)
    problems: dict[str, str] = {}
    for name in TARGETS:
        if name == wanted and not given.get(name):
            problems[name] = f"Choose the {_NOUNS[name]} this limit is for."
        elif name != wanted and given.get(name):
            problems[name] = f"Leave it empty: this limit is not for one {_NOUNS[name]}."
    if limit is not None and limit < 0:
        problems["limit"] = "At least 0."
    elif metric == "tokens" and limit is not None and limit % 1:
        problems["limit"] = "A whole number of tokens."
    return problems
