"""Members: list, invite someone by username or email, change a role, remove; pending
invitations with revoke.

Inviting says the same thing whether or not an account has that name or address, so the
form tells nobody which accounts exist; the person accepts at the link while signed in
(agentplatform/web/invitations.py). Only owners invite owners, grant or take away the
owner role; the last owner always stays (tenancy services)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from agentplatform.web.config.common import (
    PlainLabels,
    add_service_errors,
    members_admin_required,
    render_page,
)
from tenancy import selectors
from tenancy.models import InvitationStatus, Role
from tenancy.services import (
    invitation_create,
    invitation_mail,
    invitation_revoke,
    membership_remove,
    membership_set,
    tenant_sign_in_set,
)
from tenancy.sign_in import session_needs_password_sign_in
from tenancy.sign_on.sso import providers_serving

PAGE = "web/config/member_list.html"


class InviteForm(PlainLabels, forms.Form):
    invitee = forms.CharField(
        max_length=254,
        label="Username or email",
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(PlainLabels, forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


def _page(request: HttpRequest, form: InviteForm, status: int = 200, **extra) -> HttpResponse:
    memberships = selectors.memberships_of(tenant=request.tenant)
    pending = [
        invitation
        for invitation in selectors.invitations_of(tenant=request.tenant, open_only=True)
        if invitation.status == InvitationStatus.PENDING
    ]
    context = {
        "memberships": memberships,
        "invitations": pending,
        "form": form,
        "roles": Role.choices,
        "is_owner": request.principal.is_owner,
        "sso_providers": providers_serving(request.tenant),
        **extra,
    }
    return render_page(request, PAGE, context, status=status)


@members_admin_required
def member_list(request: HttpRequest) -> HttpResponse:
    return _page(request, InviteForm())


@members_admin_required
@require_POST
def member_sign_in(request: HttpRequest) -> HttpResponse:
    """Turn password sign-in on or off for the tenant's members (docs/sso.md)."""
    wanted = request.POST.get("password_sign_in")
    if wanted not in ("on", "off"):
        return _refuse(request, "Choose whether members may sign in with a password.")
    try:
        tenant_sign_in_set(
            tenant=request.tenant,
            password_sign_in=wanted == "on",
            password_session=session_needs_password_sign_in(request),
        )
    except ValidationError as error:
        return _refuse(request, " ".join(error.messages))
    state = "on" if wanted == "on" else "off"
    messages.success(request, f"Password sign-in is {state} for {request.tenant.name}.")
    return redirect("config:members", tenant_slug=request.tenant.slug)


@members_admin_required
@require_POST
def member_invite(request: HttpRequest) -> HttpResponse:
    form = InviteForm(request.POST)
    if form.is_valid():
        role = form.cleaned_data["role"]
        try:
            invitation, token = invitation_create(
                tenant=request.tenant,
                invitee=form.cleaned_data["invitee"],
                role=role,
                invited_by=request.user,
                by=request.principal,
            )
        except PermissionDenied as error:
            form.add_error("role", str(error))
            return _page(request, form, status=400)
        except ValidationError as error:
            add_service_errors(form, error)
        else:
            link = request.build_absolute_uri(reverse("invitation", args=[token]))
            invitation_mail(invitation=invitation, accept_url=link)
            # Shown on this response only (not redirected with): the token is not stored.
            response = _page(request, InviteForm(), invitation=invitation, accept_url=link)
            response["Cache-Control"] = "no-store"
            return response
    return _page(request, form, status=400)


@members_admin_required
@require_POST
def member_invitation_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    invitation = selectors.invitation_get(tenant=request.tenant, invitation_id=pk)
    try:
        invitation_revoke(invitation=invitation, by=request.principal)
    except PermissionDenied as error:
        return _refuse(request, str(error))
    messages.success(request, f"Withdrew the invitation for {invitation.invitee}.")
    return redirect("config:members", tenant_slug=request.tenant.slug)


@members_admin_required
@require_POST
def member_role(request: HttpRequest, pk: int) -> HttpResponse:
    membership = selectors.membership_get(tenant=request.tenant, membership_id=pk)
    form = RoleForm(request.POST)
    if not form.is_valid():
        return _refuse(request, "Choose one of the roles.")
    role = form.cleaned_data["role"]
    try:
        membership_set(tenant=request.tenant, user=membership.user, role=role, by=request.principal)
    except PermissionDenied as error:
        return _refuse(request, str(error))
    except ValidationError as error:
        return _refuse(request, _last_owner(error))
    messages.success(request, f"{membership.user.get_username()} is now {Role(role).label}.")
    return redirect("config:members", tenant_slug=request.tenant.slug)


@members_admin_required
@require_POST
def member_remove(request: HttpRequest, pk: int) -> HttpResponse:
    membership = selectors.membership_get(tenant=request.tenant, membership_id=pk)
    removing_self = membership.pk == request.membership.pk
    try:
        revoked = membership_remove(membership=membership, by=request.principal)
    except PermissionDenied as error:
        return _refuse(request, str(error))
    except ValidationError as error:
        return _refuse(request, _last_owner(error))
    keys = f" and revoked the API keys they made ({len(revoked)})" if revoked else ""
    messages.success(request, f"Removed {membership.user.get_username()}{keys}.")
    if removing_self:  # removed oneself: no access any more
        return redirect("home")
    return redirect("config:members", tenant_slug=request.tenant.slug)


def _refuse(request: HttpRequest, message: str) -> HttpResponse:
    """The member list with the refusal on top (status 400), nothing changed."""
    return _page(request, InviteForm(), status=400, refusal=message)


def _last_owner(error: ValidationError) -> str:
    return " ".join(error.messages) + " Make someone else an owner first."
