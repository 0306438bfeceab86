"""Context providers as one kind of thing: their capability domains and their health.

A context provider is something a tenant connects that gives its agents tools or context
(an MCP server connection; a knowledge base, registered by rag). Each declares the
capability domains it covers, from the fixed list `Domain`, and each has a health: `ok`,
`failing` with a reason fit to show (never a secret, never a library's raw error text), or
`unknown`, with the time of the last check.

The periodic check (`context_providers_check_due`, the Celery task
`tools.check_context_providers`) runs each registered check in turn; an app registers its
providers' check at startup (`register_health_check`, from AppConfig.ready), the MCP
connections' included, so the tools app never imports the apps above it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from tools.runtime.credential_leaks import redacted_url
from tools.runtime.mcp_client import McpUnavailable

logger = logging.getLogger(__name__)


class Domain(models.TextChoices):
    TASKS = "tasks", "Tasks"
    PROJECTS = "projects", "Projects"
    CALENDAR = "calendar", "Calendar"
    KNOWLEDGE = "knowledge", "Knowledge"
    PEOPLE = "people", "People"
    ORGANIZATIONS = "organizations", "Organizations"
    CODEBASE = "codebase", "Codebase"
    VAULT = "vault", "Vault"
    DATASETS = "datasets", "Datasets"
    DOCUMENTS = "documents", "Documents"


DOMAINS: tuple[str, ...] = tuple(Domain.values)
MAX_REASON = 500


def validate_domains(value: object) -> None:
    """A list of distinct names from `Domain` (empty: none declared)."""
    if not isinstance(value, list | tuple):
        raise ValidationError("Give a list of domains.")
    unknown = [str(v) for v in value if v not in DOMAINS]
    if unknown:
        raise ValidationError(
            f"Unknown domain{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}. "
            f"Choose from: {', '.join(DOMAINS)}."
        )
    if len(set(value)) != len(value):
        raise ValidationError("Name each domain once.")


def domains_field(**kwargs) -> models.Field:
    """The `domains` field of a provider model."""
    return ArrayField(
        models.CharField(max_length=20, choices=Domain.choices),
        blank=True,
        validators=[validate_domains],
        help_text="What this provider covers, for the people configuring agents: "
        + ", ".join(DOMAINS)
        + ".",
        **kwargs,
    )


class Health(models.TextChoices):
    UNKNOWN = "unknown", "Not checked yet"
    OK = "ok", "OK"
    FAILING = "failing", "Failing"


@dataclass(frozen=True)
class ProviderHealth:
    """One provider's last check, as pages and the API show it."""

    status: str  # Health
    reason: str  # "" when ok or unknown
    checked_at: datetime | None

    def as_json(self) -> dict[str, object]:
        return {"status": self.status, "reason": self.reason, "checked_at": self.checked_at}


@dataclass(frozen=True)
class OfferedToolRef:
    """What a provider lister needs of one tool an agent is offered."""

    name: str
    source: str  # the registry's label: built-in, tenant definition, MCP server, knowledge
    tags: frozenset[str]


@dataclass(frozen=True)
class ProviderEntry:
    """One context provider behind an agent's tools, as pages and the API show it."""

    kind: str  # mcp | knowledge_base | tool_source
    label: str  # "MCP server", "Knowledge base", "Tool source"
    id: int | None  # None for a registered tool source (it has no row)
    name: str
    domains: list[str]
    health: ProviderHealth
    tools: list[str]

    @property
    def domain_labels(self) -> list[str]:
        return [Domain(d).label for d in self.domains if d in Domain.values]

    def as_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "id": self.id,
            "name": self.name,
            "domains": list(self.domains),
            "health": self.health.as_json(),
            "tools": list(self.tools),
        }


# (tenant id, agent id or None, the agent's offered tools) -> the providers of one kind
ProviderLister = Callable[[int, "int | None", Sequence[OfferedToolRef]], list[ProviderEntry]]
_listers: list[tuple[str, ProviderLister]] = []


def register_provider_lister(kind: str, lister: ProviderLister) -> None:
    """Have `context_providers_for` ask `lister` for the providers of `kind`."""
    if all(known != kind for known, _ in _listers):
        _listers.append((kind, lister))


def context_providers_for(
    tenant_id: int, agent_id: int | None, offered: Sequence[OfferedToolRef]
) -> list[ProviderEntry]:
    """The context providers behind an agent's offered tools (from
    `agents.tool_sources.effective_tools`), kind by kind. One query per kind at most."""
    return [entry for _, lister in _listers for entry in lister(tenant_id, agent_id, offered)]


# -- safe reasons ------------------------------------------------------------------------
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def clean_reason(text: str, *, secrets: Iterable[str | None] = ()) -> str:
    """`text` made fit to store and show: any of `secrets` masked, control characters
    gone, at most MAX_REASON characters."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
            for part in secret.split():  # "Bearer <token>": the token alone too
                if len(part) >= 8:
                    text = text.replace(part, "[redacted]")
    text = _CONTROL.sub(" ", text).strip()
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def mcp_failure_reason(exc: McpUnavailable, *, secret: str | None = None) -> str:
    """What went wrong reaching an MCP server, in our words: the server's URL and one of a
    few known reasons. The underlying library's text is never passed on (it may quote
    headers or a server's answer); only the refusal of our own egress guard, which is
    written to be shown, and the HTTP status are kept."""
    reason = exc.reason
    if reason.startswith(("timed out", "the server refused the credentials", "no account")):
        said = reason  # (ours: "no account connected yet", tools.mcp_connections)
    elif match := re.match(r"the server answered HTTP (\d{3})", reason):
        said = f"the server answered HTTP {match.group(1)}"
    elif re.fullmatch(r"destination [\w.:\[\]-]+ is not allowed \([\w -]+\)", reason):
        said = reason  # the egress guard's refusal: written to be shown
    elif reason.startswith("cannot resolve host"):
        said = "cannot resolve the host name"
    elif reason.startswith("cannot connect"):
        said = "cannot connect (the connection was refused or the host is unreachable)"
    elif reason.startswith("resource "):
        said = "the context resource has no text"
    elif match := re.search(r"Redirect to (\S+?);? not followed", reason):
        said = (
            f"Redirect to {redacted_url(match.group(1))} not followed; redirects are followed "
            "only within the server's origin"
        )
    elif "redirect" in reason.lower():
        said = "the server redirected elsewhere; redirects are followed only within its origin"
    elif reason.startswith("MCP error"):
        said = "the server answered with an MCP protocol error"
    else:
        said = "the server's answer could not be used as MCP"
    return clean_reason(f"{redacted_url(exc.url)}: {said}", secrets=[secret])


# -- the periodic check ------------------------------------------------------------------
# (now, every_s) -> {"ok": n, "failing": n}: checks the providers of every tenant whose
# last check is `every_s` old or more.
HealthCheck = Callable[[datetime, int], dict[str, int]]
_checks: list[tuple[str, HealthCheck]] = []


def register_health_check(kind: str, check: HealthCheck) -> None:
    """Have the periodic check run `check` for the providers of `kind`."""
    if all(known != kind for known, _ in _checks):
        _checks.append((kind, check))


def health_check_kinds() -> list[str]:
    return [kind for kind, _ in _checks]


def check_cutoff(now: datetime, every_s: int) -> datetime:
    return now - timedelta(seconds=every_s)


def context_providers_check_due(now: datetime | None = None) -> dict[str, dict[str, int]]:
    """Check every provider whose last check is CONTEXT_PROVIDER_HEALTH_S old or more, kind
    by kind, one after another (each bounded by its own timeout). One kind's failure is
    logged and does not stop the others."""
    now = now or timezone.now()
    every_s = settings.CONTEXT_PROVIDER_HEALTH_S
    outcome: dict[str, dict[str, int]] = {}
    for kind, check in _checks:
        try:
            outcome[kind] = check(now, every_s)
        except Exception:  # one kind's bug must not stop the others' checks
            logger.exception("health check of %s providers failed", kind)
            outcome[kind] = {"error": 1}
    return outcome
