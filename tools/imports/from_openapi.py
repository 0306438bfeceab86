"""Previewing and importing an OpenAPI document's operations as a tenant's HTTP tools.

The document comes as text or by URL; a URL is fetched through the guarded egress client
(private addresses refused unless EGRESS_ALLOWLIST allows them, as for any tool call),
bounded in size and time. The preview shows, per operation, the tool the model will see
and how it differs from the tenant's tool of that name. The import saves the operations
an admin picks, all or none, each through `tool_definition_save` (the configuration
compiler checks it, the audit log and config history record it), with one secret for the
whole set. Re-importing a changed document updates the tools that changed; what an admin
added to a tool's request mapping since (a model_view, retries, a credential the document
could not describe) stays.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from base import versions
from base.config_checks import problems_saving_together
from tenancy.models import Tenant
from tools import selectors
from tools.loader import egress_client
from tools.models import ToolDefinition
from tools.runtime.builtins import BUILTINS
from tools.runtime.egress import (
    EgressConnectError,
    EgressError,
    EgressRefused,
    EgressTimeout,
    ResponseTooLarge,
)
from tools.runtime.imports import ImportRefused, ToolDraft
from tools.runtime.imports.document import MAX_DOCUMENT_BYTES
from tools.runtime.imports.openapi import OpenApiDrafts, openapi_drafts
from tools.runtime.validation import SchemaError, check_schema
from tools.services import tool_definition_save

FETCH_TIMEOUT_S = 10.0
MAX_URL_CHARS = 2_000
COMPARED = ("kind", "description", "input_schema", "output_schema", "config", "effect")


@dataclass(frozen=True)
class PreviewedTool:
    """One operation as a tool: `status` new, changed (`changes` names the fields) or
    unchanged against the tenant's tool of the same name, `differences` the changed fields'
    (name, stored value, imported value); `problems`: why saving it would be refused (its
    schemas); `notes`: what the import could not carry over."""

    operation_id: str
    draft: ToolDraft
    status: str
    changes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    replaces_builtin: bool = False
    differences: tuple[tuple[str, Any, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        draft = self.draft
        return {
            "operation_id": self.operation_id,
            "source": draft.source,
            "name": draft.name,
            "description": draft.description,
            "input_schema": draft.input_schema,
            "output_schema": draft.output_schema,
            "config": draft.config,
            "sends_credential": "auth" in draft.config,
            "notes": list(draft.notes),
            "status": self.status,
            "changes": list(self.changes),
            "problems": list(self.problems),
            "replaces_builtin": self.replaces_builtin,
        }


@dataclass(frozen=True)
class OpenApiPreview:
    title: str
    format: str
    base_url: str
    tools: tuple[PreviewedTool, ...]
    skipped: tuple[dict[str, str], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "format": self.format,
            "base_url": self.base_url,
            "tools": [tool.as_dict() for tool in self.tools],
            "skipped": list(self.skipped),
            "notes": list(self.notes),
        }


def openapi_preview(
    *, tenant: Tenant, text: str | None = None, url: str | None = None, base_url: str | None = None
) -> OpenApiPreview:
    """What importing the document would make, against the tenant's tools. Saves nothing;
    fetches `url` (ImportRefused: the document or the fetch). One query."""
    drafts = _drafts(text=text, url=url, base_url=base_url)
    current = selectors.definitions_of(tenant=tenant)
    verdicts: dict[str, str | None] = {}  # documents repeat schemas: each checked once
    tools = tuple(
        _previewed(item.operation_id, item.draft, current, verdicts) for item in drafts.operations
    )
    skipped = tuple(
        {"source": s.source, "operation_id": s.operation_id, "reason": s.reason}
        for s in drafts.skipped
    )
    notes = drafts.notes
    if len(hosts := _credential_hosts([item.draft for item in drafts.operations])) > 1:
        notes = (
            *notes,
            f"The operations that send a credential call {len(hosts)} hosts "
            f"({', '.join(hosts[:5])}): import each host's operations separately, each with "
            "its secret.",
        )
    return OpenApiPreview(drafts.title, drafts.format, drafts.base_url, tools, skipped, notes)


def openapi_import(
    *,
    tenant: Tenant,
    operations: list[str],
    text: str | None = None,
    url: str | None = None,
    base_url: str | None = None,
    secret: str | None = None,
    username: str | None = None,
) -> list[ToolDefinition]:
    """Save the tools of the chosen `operations` (operationIds, "GET /path" sources or tool
    names) in one transaction: all or none. `secret` is the credential of every chosen tool
    that sends one (a tool of that name keeps its stored secret when none is given);
    `username` that of basic authentication. ImportRefused (nothing saved): the document,
    the choice, or the first tool the configuration refuses, at its path."""
    drafts = _drafts(text=text, url=url, base_url=base_url)
    chosen = _chosen(drafts, operations)
    if secret:
        _one_host(chosen)
    current = selectors.definitions_of(tenant=tenant)
    planned: list[tuple[ToolDefinition, dict[str, Any]]] = []
    for draft in chosen:
        existing = current.get(draft.name)
        changes = _changes(draft, existing)
        auth = changes["config"].get("auth")
        if isinstance(auth, dict):
            if auth.get("type") == "basic" and username is not None:
                changes["config"]["auth"] = {**auth, "username": username}
            if secret:
                changes["secret"] = secret
            elif existing is None or not existing.secret:
                raise ImportRefused(f"{draft.name} sends a credential: give the secret.", "secret")
        planned.append((existing or ToolDefinition(tenant=tenant), changes))
    # The tenant's whole configuration is compiled once, with every chosen tool in it, not
    # once per save. Bumps stay this import's until it commits: a rolled-back import leaves
    # no registry built from its rows current (as the configuration document's import).
    with transaction.atomic(), versions.held():
        together = _checked_together(planned)
        return [
            _saved(tenant, definition, changes, graph_checked=together)
            for definition, changes in planned
        ]


def _checked_together(planned: list[tuple[ToolDefinition, dict[str, Any]]]) -> bool:
    """Each tool as it will be, checked on its own, then the end state with all of them
    compiled once (`base.config_checks.problems_saving_together`). False: no whole-graph
    check is registered, so each save checks itself."""
    instances = []
    for definition, changes in planned:
        candidate = copy.copy(definition)
        for name, value in changes.items():
            setattr(candidate, name, value)
        candidate.graph_checked = True  # its own rules only, here
        try:
            candidate.full_clean()
        except ValidationError as exc:
            raise ImportRefused(_message(exc), f"tools.{candidate.name}") from None
        instances.append(candidate)
    problems = problems_saving_together(instances)
    if problems is None:
        return False
    if problems:
        index, reason = problems[0]
        where = "tools" if index is None else f"tools.{instances[index].name}"
        raise ImportRefused(reason[:1000], where)
    return True


def _saved(
    tenant: Tenant, definition: ToolDefinition, changes: dict[str, Any], *, graph_checked: bool
) -> ToolDefinition:
    try:
        return tool_definition_save(
            tenant=tenant,
            definition=definition if definition.pk is not None else None,
            changes=changes,
            graph_checked=graph_checked,
        )
    except ValidationError as exc:
        raise ImportRefused(_message(exc), f"tools.{changes['name']}") from None


def _one_host(chosen: list[ToolDraft]) -> None:
    """One secret is for one API: chosen tools that send a credential to more than one
    host (an operation's own `servers`) are refused, to be imported host by host."""
    hosts = _credential_hosts(chosen)
    if len(hosts) > 1:
        shown = ", ".join(hosts[:5])
        raise ImportRefused(
            f"The chosen operations send the secret to {len(hosts)} hosts ({shown}): one "
            "secret is for one host, so import each host's operations separately.",
            "operations",
        )


def _credential_hosts(drafts: list[ToolDraft]) -> list[str]:
    return sorted({_host(draft.config.get("url")) for draft in drafts if "auth" in draft.config})


@dataclass
class FetchedDocuments:
    """One configuration plan's OpenAPI documents: each URL fetched once, each (URL,
    base_url) read once, however many `tool_imports` entries name them; refusals too."""

    bodies: dict[str, bytes | ImportRefused] = field(default_factory=dict)
    drafts: dict[tuple[str, str | None], OpenApiDrafts | ImportRefused] = field(
        default_factory=dict
    )

    def read(self, url: str, base_url: str | None) -> OpenApiDrafts:
        key = (url, base_url)
        if key not in self.drafts:
            if url not in self.bodies:
                self.bodies[url] = _remembered(lambda: _fetched(url))
            body = self.bodies[url]
            self.drafts[key] = (
                body
                if isinstance(body, ImportRefused)
                else _remembered(lambda: openapi_drafts(body, document_url=url, base_url=base_url))
            )
        known = self.drafts[key]
        if isinstance(known, ImportRefused):
            raise ImportRefused(known.message, known.path)
        return known


def _remembered(call: Any) -> Any:
    try:
        return call()
    except ImportRefused as exc:
        return exc


def openapi_tool_entries(
    *,
    url: str,
    operations: list[str],
    base_url: str | None = None,
    documents: FetchedDocuments | None = None,
) -> list[dict[str, Any]]:
    """The definition fields of the chosen operations' tools, for the configuration
    document's `tool_imports` (agents/config_tool_imports.py): fetched from `url` as a
    preview's document is. `documents`: the plan's, so a URL several entries name is
    fetched once. ImportRefused: the document, the fetch or the choice."""
    drafts = (documents if documents is not None else FetchedDocuments()).read(url, base_url)
    return [{**draft.definition_fields(), "effect": draft.effect or None}
            for draft in _chosen(drafts, operations)]  # fmt: skip


def _host(url: Any) -> str:
    try:
        return (urlsplit(url).hostname or "") if isinstance(url, str) else ""
    except ValueError:
        return ""


# -- the document ------------------------------------------------------------------------
def _drafts(*, text: str | None, url: str | None, base_url: str | None) -> OpenApiDrafts:
    if (text is None) == (url is None):
        raise ImportRefused("Give the document's text or its URL (one of them).")
    if url is not None:
        return openapi_drafts(_fetched(url), document_url=url, base_url=base_url)
    return openapi_drafts(text, base_url=base_url)


def _fetched(url: str) -> bytes:
    """The document at `url`, through the egress guard; bounded in size and time. Refusals
    are our own sentences: never the guard's or the HTTP library's text, which may name
    the address an internal host name resolved to."""
    if len(url) > MAX_URL_CHARS or "\x00" in url:
        raise ImportRefused("That URL is too long.", "url")
    try:
        parts = urlsplit(url)
        has_host = bool(parts.hostname)
    except ValueError:
        raise ImportRefused("Cannot fetch the document: that is not a valid URL.", "url") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ImportRefused(
            "Cannot fetch the document: its URL must start with http:// or https://.", "url"
        )
    if not has_host:
        raise ImportRefused("Cannot fetch the document: its URL has no host.", "url")
    client = egress_client(tuple(settings.EGRESS_ALLOWLIST))
    try:
        response = async_to_sync(client.request)(
            "GET",
            url,
            headers={"accept": "application/json, application/yaml, text/yaml, */*;q=0.5"},
            timeout_s=FETCH_TIMEOUT_S,
            max_bytes=MAX_DOCUMENT_BYTES,
        )
    except ResponseTooLarge:
        raise ImportRefused(
            f"The document at that URL is larger than {MAX_DOCUMENT_BYTES // 1_000_000} MB.", "url"
        ) from None
    except EgressTimeout:
        raise ImportRefused(
            f"Fetching the document timed out after {FETCH_TIMEOUT_S:g} s.", "url"
        ) from None
    except EgressConnectError:
        raise ImportRefused("Cannot connect to the document's host.", "url") from None
    except EgressRefused as exc:
        raise ImportRefused(_refusal(str(exc)), "url") from None
    except EgressError:
        raise ImportRefused(
            "Cannot fetch the document: its server's answer could not be read.", "url"
        ) from None
    if response.status_code >= 400:
        raise ImportRefused(
            f"Cannot fetch the document: its server answered HTTP {response.status_code}.", "url"
        )
    return response.content


# The egress guard's refusals (tools/runtime/egress.py), by how its message starts, as
# what the tenant is told; its own text may name an internal address.
_REFUSALS = (
    ("destination", "Cannot fetch the document: its URL points to a private or local address."),
    ("more than", "Cannot fetch the document: its server redirects too many times."),
    ("invalid redirect", "Cannot fetch the document: its server redirects to no valid URL."),
    ("invalid URL", "Cannot fetch the document: that is not a valid URL."),
    ("URL", "Cannot fetch the document: that is not a valid URL."),
    ("scheme", "Cannot fetch the document: its URL must start with http:// or https://."),
)


def _refusal(guard_text: str) -> str:
    return next(
        (ours for start, ours in _REFUSALS if guard_text.startswith(start)),
        "Cannot fetch the document: the URL is not allowed.",
    )


# -- preview and changes -----------------------------------------------------------------
def _previewed(
    operation_id: str,
    draft: ToolDraft,
    current: dict[str, ToolDefinition],
    verdicts: dict[str, str | None],
) -> PreviewedTool:
    problems = []
    for what, schema in (
        ("input_schema", draft.input_schema),
        ("output_schema", draft.output_schema),
    ):
        if schema is None:
            continue
        key = what + _canonical(schema)
        if key not in verdicts:
            try:
                check_schema(schema, what=what)
                verdicts[key] = None
            except SchemaError as exc:
                verdicts[key] = str(exc)
        if verdicts[key] is not None:
            problems.append(verdicts[key])
    existing = current.get(draft.name)
    differences: tuple[tuple[str, Any, Any], ...] = ()
    status = "new"
    if existing is not None:
        proposed = _changes(draft, existing)
        differences = tuple(
            (name, getattr(existing, name), proposed[name])
            for name in COMPARED
            if _canonical(proposed[name]) != _canonical(getattr(existing, name))
        )
        status = "changed" if differences else "unchanged"
    return PreviewedTool(
        operation_id=operation_id,
        draft=draft,
        status=status,
        changes=tuple(name for name, _, _ in differences),
        problems=tuple(problems),
        replaces_builtin=BUILTINS.has(draft.name),
        differences=differences,
    )


def _changes(draft: ToolDraft, existing: ToolDefinition | None) -> dict[str, Any]:
    """The definition's fields the import sets: the draft's, its request mapping merged
    over what the existing tool's adds (model_view, retries, an auth added by hand)."""
    changes = draft.definition_fields()
    if existing is not None and isinstance(existing.config, dict) and existing.kind == "http":
        config = {**existing.config, **draft.config}
        if "arguments" in draft.config:
            config["arguments"] = _arguments_merged(
                draft.config["arguments"], existing.config.get("arguments")
            )
        changes["config"] = config
    else:
        changes["config"] = dict(draft.config)
    return changes


def _arguments_merged(drafted: Any, stored: Any) -> Any:
    """The draft's argument targets, each over the stored target of the same argument when
    that one sends it to the same place: what an admin added to it (a `reference` kind, say)
    stays; a target the document moved is the document's."""
    if not isinstance(drafted, list) or not isinstance(stored, list):
        return drafted
    by_argument = {
        target["argument"]: target
        for target in stored
        if isinstance(target, dict) and isinstance(target.get("argument"), str)
    }
    merged = []
    for target in drafted:
        before = by_argument.get(target.get("argument")) if isinstance(target, dict) else None
        if before is not None and _place(before) == _place(target):
            target = {**before, **target}
        merged.append(target)
    return merged


def _place(target: dict[str, Any]) -> tuple[Any, Any]:
    """Where an argument target sends its value: the request part and the name there."""
    return target.get("to"), target.get("name", target.get("argument"))


def _chosen(drafts: OpenApiDrafts, operations: list[str]) -> list[ToolDraft]:
    if not operations:
        raise ImportRefused("Pick at least one operation to import.", "operations")
    by_key: dict[str, ToolDraft] = {}
    for item in drafts.operations:
        for key in (item.operation_id, item.draft.source, item.draft.name):
            if key:
                by_key.setdefault(key, item.draft)
    skipped = {key: s.reason for s in drafts.skipped for key in (s.operation_id, s.source) if key}
    chosen: dict[str, ToolDraft] = {}
    for index, wanted in enumerate(operations):
        draft = by_key.get(wanted)
        if draft is None:
            reason = skipped.get(wanted)
            shown = repr(wanted[:100])
            message = (
                f"{shown} cannot be imported: {reason}."
                if reason
                else f"The document has no operation {shown}."
            )
            raise ImportRefused(message, f"operations[{index}]")
        chosen[draft.name] = draft
    return list(chosen.values())


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _message(exc: ValidationError) -> str:
    if hasattr(exc, "error_dict"):
        return "; ".join(
            f"{name}: {' '.join(messages)}" for name, messages in exc.message_dict.items()
        )[:1000]
    return " ".join(exc.messages)[:1000]
