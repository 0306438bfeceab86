"""A person's data on the pages (lifecycle.person; docs/operations.md, "Offboarding"):
`/t/<tenant>/my-data/`, where a member downloads their own conversations, facts and runs;
`/t/<tenant>/people/<user id>/erase/`, where an admin erases a person from the tenant after
confirming (another tenant's person, or none: 404); `/t/<tenant>/export/`, where an owner
asks for the whole workspace's archive, follows its build and downloads it
(lifecycle.tenant_exports); `/t/<tenant>/erasure/`, where an owner asks for the whole
workspace's erasure, which an operator confirms."""

from __future__ import annotations

import tempfile

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from lifecycle import erasure_requests, tenant_exports
from lifecycle.person import person_erase, person_export, person_in_tenant
from tenancy.policy import Action
from tenancy.resolution import tenant_member_required

SPOOL_BYTES = 8 << 20  # an archive past this spills to a temporary file, not memory
CONFIRM = "erase"


@tenant_member_required(Action.READ_DATA)
def my_data(request: HttpRequest) -> HttpResponse:
    return render(request, "web/my_data.html", {"tenant_slug": request.tenant.slug})


@tenant_member_required(Action.READ_DATA)
def my_data_download(request: HttpRequest) -> FileResponse:
    archive = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (the response closes it)
    person_export(tenant=request.tenant, user=request.user, output=archive)
    archive.seek(0)
    name = f"{request.tenant.slug}-{request.user.get_username()}-data.zip"
    return FileResponse(archive, as_attachment=True, filename=name, content_type="application/zip")


@tenant_member_required(Action.MANAGE_MEMBERS)
def person_erasure(request: HttpRequest, user_id: int) -> HttpResponse:
    person = person_in_tenant(tenant=request.tenant, user_id=user_id)
    context = {"person": person, "tenant_slug": request.tenant.slug, "confirm": CONFIRM}
    if request.method != "POST":
        return render(request, "web/person_erasure.html", context)
    if request.POST.get("confirm", "").strip().lower() != CONFIRM:
        context["error"] = f"Type {CONFIRM} to confirm."
        return render(request, "web/person_erasure.html", context, status=400)
    try:
        erased = person_erase(tenant=request.tenant, user=person, by=request.principal)
    except (ValidationError, PermissionDenied) as refused:
        text = " ".join(refused.messages) if isinstance(refused, ValidationError) else str(refused)
        context["error"] = text or "You may not erase this person."
        return render(
            request,
            "web/person_erasure.html",
            context,
            status=403 if isinstance(refused, PermissionDenied) else 400,
        )
    messages.success(
        request,
        f"{person.get_username()} is erased: {erased['conversations']} conversations, "
        f"{erased['facts']} facts, {erased['attachments']} files deleted; "
        f"{erased['runs_anonymised']} runs anonymised.",
    )
    return redirect("config:members", tenant_slug=request.tenant.slug)


@tenant_member_required(Action.MANAGE_MEMBERS)
def tenant_erasure(request: HttpRequest) -> HttpResponse:
    """The owner asks for the workspace's erasure (typing its slug) or withdraws the
    request; an operator confirms it (lifecycle.erasure_requests). Admins see the state."""
    tenant = request.tenant
    context = {
        "pending": erasure_requests.erasure_request_of(tenant=tenant),
        "is_owner": request.principal.is_owner,
        "tenant_slug": tenant.slug,
    }
    if request.method != "POST":
        return render(request, "web/tenant_erasure.html", context)
    action = request.POST.get("action")
    if action not in ("request", "withdraw") or (
        action == "request" and request.POST.get("confirm", "").strip() != tenant.slug
    ):
        context["error"] = f"Type the workspace's slug, {tenant.slug}, to ask for its erasure."
        return render(request, "web/tenant_erasure.html", context, status=400)
    try:
        if action == "request":
            erasure_requests.erasure_request(
                tenant=tenant, by=request.principal, reason=request.POST.get("reason", "")
            )
            messages.success(request, "Your request is sent: an operator will confirm it.")
        else:
            erasure_requests.erasure_request_withdraw(tenant=tenant, by=request.principal)
            messages.success(request, "Your request is withdrawn.")
    except ValidationError as refused:
        context["error"] = " ".join(refused.messages)
        return render(request, "web/tenant_erasure.html", context, status=400)
    return redirect("tenant_erasure", tenant_slug=tenant.slug)


@tenant_member_required(Action.EXPORT_TENANT)
def tenant_export(request: HttpRequest) -> HttpResponse:
    """GET: the export's state (htmx polls the status part while it builds); POST: ask for
    a new one (built by a worker)."""
    if request.method == "POST":
        tenant_exports.export_request(tenant=request.tenant, by=request.principal)
        messages.success(
            request, "Export asked for: a worker builds the archive, and this page follows it."
        )
        return redirect("tenant_export", tenant_slug=request.tenant.slug)
    context = {
        "state": tenant_exports.export_state(tenant=request.tenant),
        "tenant_slug": request.tenant.slug,
    }
    if getattr(request, "htmx", False):
        return render(request, "web/tenant_export_status.html", context)
    return render(request, "web/tenant_export.html", context)


@tenant_member_required(Action.EXPORT_TENANT)
def tenant_export_download(request: HttpRequest) -> FileResponse:
    opened, name, size = tenant_exports.export_open(tenant=request.tenant, by=request.principal)
    response = FileResponse(
        opened, as_attachment=True, filename=name, content_type="application/zip"
    )
    if size:
        response["Content-Length"] = str(size)
    return response
