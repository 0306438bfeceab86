"""History pages: the versions of a configured object, one version with its diff, and
restoring it (owners and admins, like every configuration page). The rules are
`tenancy.records.history`'s, shared with the admin and REST."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import models
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from agentplatform.web.config.common import admin_required, render_page
from tenancy import selectors
from tenancy.records import history
from tenancy.records.audit_log import shown
from tenancy.records.saving import SaveConflict

# Where each kind is edited (its edit page takes a slug, a name or an id).
EDIT_PAGES = {
    "agents": ("config:agent_edit", "slug"),
    "crews": ("config:crew_edit", "slug"),
    "workflows": ("config:workflow_edit", "slug"),
    "tools": ("config:tool_edit", "pk"),
    "provider-connections": ("config:connection_edit", "pk"),
    "mcp-connections": ("config:mcp_connection_edit", "pk"),
    "knowledge-bases": ("knowledge:edit", "slug"),
    "skills": ("config:skills", None),  # their one page (a skill's versions are uploads)
}


def _object(request: HttpRequest, kind_name: str, pk: int) -> tuple[history.Kind, models.Model]:
    kind = history.kind_named(kind_name)
    obj = selectors.versioned_object_get(
        tenant=request.tenant, kind=kind_name, field="pk", value=pk
    )
    return kind, obj


def _context(request: HttpRequest, kind: history.Kind, obj: models.Model) -> dict:
    page, attr = EDIT_PAGES[kind.name]
    names = {attr: getattr(obj, attr)} if attr else {}
    edit_url = reverse(page, kwargs={"tenant_slug": request.tenant.slug, **names})
    return {"kind": kind, "object": obj, "edit_url": edit_url}


def diff_rows(version) -> list[tuple[str, str, str]]:
    """(name, before, after) as text for the page."""
    return [
        (name.replace("_", " "), shown(before), shown(after))
        for name, before, after in history.rows(version, named=True)
    ]


@admin_required
def version_list(request: HttpRequest, kind: str, pk: int) -> HttpResponse:
    kind_, obj = _object(request, kind, pk)
    versions = list(history.versions(request.tenant, obj))
    for version in versions:
        version.rows = diff_rows(version)
    context = {**_context(request, kind_, obj), "versions": versions}
    return render_page(request, "web/config/history.html", context)


@admin_required
def version_detail(request: HttpRequest, kind: str, pk: int, number: int) -> HttpResponse:
    kind_, obj = _object(request, kind, pk)
    version = history.version_get(request.tenant, obj, number)
    fields = [(name.replace("_", " "), shown(value)) for name, value in history.settings(version)]
    latest = selectors.latest_version_number(tenant=request.tenant, instance=obj)
    context = {
        **_context(request, kind_, obj),
        "version": version,
        "rows": diff_rows(version),
        "fields": fields,
        "is_latest": version.number == latest,
    }
    return render_page(request, "web/config/history_version.html", context)


@admin_required
@require_POST
def version_restore(request: HttpRequest, kind: str, pk: int, number: int) -> HttpResponse:
    """Restore the version (the page's button asks to confirm first); refusals are shown
    on the version's page."""
    _, obj = _object(request, kind, pk)
    try:
        restored = history.restore(
            tenant=request.tenant, instance=obj, number=number, actor=request.user
        )
    except (ValidationError, SaveConflict) as refused:
        texts = refused.messages if isinstance(refused, ValidationError) else [str(refused)]
        messages.error(request, f"Version {number} cannot be restored: {' '.join(texts)}")
        return redirect(
            "config:history_version",
            tenant_slug=request.tenant.slug,
            kind=kind,
            pk=pk,
            number=number,
        )
    if isinstance(restored, history.Proposed):
        messages.info(request, history.proposed_text(restored, obj))
    else:
        messages.success(
            request, f"Restored version {number} of “{obj}” as version {restored.number}."
        )
    return redirect("config:history", tenant_slug=request.tenant.slug, kind=kind, pk=pk)
