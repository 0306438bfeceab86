"""Members: list, add an existing user by username or email, change a role, remove.

Adding says the same thing whenever an account cannot be added (none, inactive, or the
address is ambiguous), so the form does not tell which accounts exist. Only owners
grant or take away the owner role; the last owner always stays (tenancy services)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agentplatform.tenancy.access import get_for_tenant
from agentplatform.tenancy.models import Membership, Role
from agentplatform.tenancy.services import membership_remove, membership_set
from agentplatform.web.config.common import PlainLabels, admin_required, render_page

PAGE = "web/config/member_list.html"
CANNOT_ADD = "No account can be added with that username or email. Check it, or ask the "
CANNOT_ADD += "person to sign up first."
OWNERS_ONLY = "Only an owner can grant or take away the owner role."


class AddMemberForm(PlainLabels, forms.Form):
    who = forms.CharField(
        max_length=254,
        label="Username or email",
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(PlainLabels, forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


def user_lookup(who: str) -> AbstractBaseUser | None:
    """The one active account with this username or email (case-insensitive), or None.
    One query."""
    who = who.strip()
    if not who:
        return None
    User = get_user_model()
    found = list(User.objects.filter(Q(username=who) | Q(email__iexact=who), is_active=True)[:2])
    return found[0] if len(found) == 1 else None


def _page(request: HttpRequest, form: AddMemberForm, status: int = 200, **extra) -> HttpResponse:
    memberships = Membership.objects.filter(tenant=request.tenant).select_related("user")
    context = {
        "memberships": memberships,
        "form": form,
        "roles": Role.choices,
        "is_owner": request.membership.has_role(Role.OWNER),
        **extra,
    }
    return render_page(request, PAGE, context, status=status)


@admin_required
def member_list(request: HttpRequest) -> HttpResponse:
    return _page(request, AddMemberForm())


@admin_required
@require_POST
def member_add(request: HttpRequest) -> HttpResponse:
    form = AddMemberForm(request.POST)
    if form.is_valid():
        user = user_lookup(form.cleaned_data["who"])
        role = form.cleaned_data["role"]
        if user is None:
            form.add_error("who", CANNOT_ADD)
        elif Membership.objects.filter(tenant=request.tenant, user=user).exists():
            form.add_error("who", "This account is a member already; change its role below.")
        elif role == Role.OWNER and not request.membership.has_role(Role.OWNER):
            form.add_error("role", OWNERS_ONLY)
        else:
            try:
                membership_set(tenant=request.tenant, user=user, role=role, added_by=request.user)
            except ValidationError:
                form.add_error("who", CANNOT_ADD)  # the same words: nothing about the account
            else:
                messages.success(request, f"Added {user.get_username()} as {Role(role).label}.")
                return redirect("config:members", tenant_slug=request.tenant.slug)
    return _page(request, form, status=400)


@admin_required
@require_POST
def member_role(request: HttpRequest, pk: int) -> HttpResponse:
    membership = get_for_tenant(Membership.objects.select_related("user"), request.tenant, pk=pk)
    form = RoleForm(request.POST)
    if not form.is_valid():
        return _refuse(request, "Choose one of the roles.")
    role = form.cleaned_data["role"]
    if Role.OWNER in (role, membership.role) and not request.membership.has_role(Role.OWNER):
        return _refuse(request, OWNERS_ONLY)
    try:
        membership_set(tenant=request.tenant, user=membership.user, role=role)
    except ValidationError as error:
        return _refuse(request, _last_owner(error))
    messages.success(request, f"{membership.user.get_username()} is now {Role(role).label}.")
    return redirect("config:members", tenant_slug=request.tenant.slug)


@admin_required
@require_POST
def member_remove(request: HttpRequest, pk: int) -> HttpResponse:
    membership = get_for_tenant(Membership.objects.select_related("user"), request.tenant, pk=pk)
    if membership.role == Role.OWNER and not request.membership.has_role(Role.OWNER):
        return _refuse(request, OWNERS_ONLY)
    removing_self = membership.pk == request.membership.pk
    try:
        membership_remove(membership=membership)
    except ValidationError as error:
        return _refuse(request, _last_owner(error))
    messages.success(request, f"Removed {membership.user.get_username()}.")
    if removing_self:  # removed oneself: no access any more
        return redirect("home")
    return redirect("config:members", tenant_slug=request.tenant.slug)


def _refuse(request: HttpRequest, message: str) -> HttpResponse:
    """The member list with the refusal on top (status 400), nothing changed."""
    return _page(request, AddMemberForm(), status=400, refusal=message)


def _last_owner(error: ValidationError) -> str:
    return " ".join(error.messages) + " Make someone else an owner first."
