from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Q
from django.shortcuts import render
from django.utils import timezone
from guardian.conf import settings as guardian_settings

from agentplatform.tenancy import services
from agentplatform.tenancy.admin_site import admin_tenant_ids
from agentplatform.tenancy.models import (
    ApiKey,
    IdentityProvider,
    IdentityProviderGroup,
    Membership,
    Role,
    Scope,
    Tenant,
)
from agentplatform.tenancy.scoped_admin import HiddenRowsAre404, TenantScopedAdmin, TenantScopedForm


@admin.register(Tenant)
class TenantAdmin(HiddenRowsAre404, admin.ModelAdmin):
    list_display = ["name", "slug", "active", "password_sign_in", "time_zone", "created_at"]
    search_fields = ["name", "slug"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)

        class PasswordOffChecked(form):
            def clean(self):
                cleaned = super().clean()
                turning_off = "password_sign_in" in self.changed_data and not cleaned.get(
                    "password_sign_in", True
                )
                if turning_off and self.instance.pk:
                    try:
                        services.check_password_sign_in_off(tenant=self.instance)
                    except ValidationError as error:
                        self.add_error("password_sign_in", error)
                return cleaned

        return PasswordOffChecked

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(pk__in=admin_tenant_ids(request))

    def get_readonly_fields(self, request, obj=None):
        return [] if request.user.is_superuser else ["slug", "active"]

    def _may(self, request, obj) -> bool:
        if request.user.is_superuser:
            return True
        ids = admin_tenant_ids(request)
        return bool(ids) and (obj is None or obj.pk in ids)

    def has_module_permission(self, request) -> bool:
        return self._may(request, None)

    def has_view_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    def has_change_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    def has_add_permission(self, request) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_superuser


class UserByNameField(forms.CharField):
    """An existing user by username or e-mail — no list of every user is ever rendered."""

    def prepare_value(self, value):
        if isinstance(value, int):
            user = get_user_model().objects.filter(pk=value).first()
            return user.get_username() if user else ""
        return value

    def clean(self, value):
        text = super().clean(value)
        users = (
            get_user_model()
            .objects.filter(Q(username=text) | Q(email__iexact=text), is_active=True)
            .exclude(username=guardian_settings.ANONYMOUS_USER_NAME)
        )
        if users.count() != 1:
            raise ValidationError("No single user has this username or e-mail.")
        return users.get()


def is_owner_of(user, tenant_id: int) -> bool:
    return (
        user.is_superuser
        or Membership.objects.filter(user=user, tenant_id=tenant_id, role=Role.OWNER).exists()
    )


class MembershipForm(TenantScopedForm):
    user = UserByNameField(label="User (username or e-mail)")
    requesting_user = None  # set by MembershipAdmin.get_form

    class Meta:
        model = Membership
        fields = ["tenant", "user", "role"]

    def clean(self) -> dict:
        cleaned = super().clean()
        was_owner = self.instance.pk and self.instance.role == Role.OWNER
        if was_owner and cleaned.get("role") != Role.OWNER:
            owners = Membership.objects.filter(tenant_id=self.instance.tenant_id, role=Role.OWNER)
            if not owners.exclude(pk=self.instance.pk).exists():
                self.add_error("role", "A tenant must keep at least one owner.")
        tenant = cleaned.get("tenant") or (
            self.instance.tenant if self.instance.tenant_id else None
        )
        user = cleaned.get("user")
        if user is not None and not self.instance.pk:
            try:  # the services' rule, shown on the form
                services.check_may_join(user=user, added_by=self.requesting_user)
            except ValidationError as error:
                self.add_error("user", error)
        making_owner = cleaned.get("role") == Role.OWNER and tenant is not None
        if making_owner and not is_owner_of(self.requesting_user, tenant.pk):
            self.add_error("role", "Only an owner can make owners.")
        return cleaned


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    form = MembershipForm
    list_display = ["user", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "user__email"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.requesting_user = request.user
        return form

    def has_add_permission(self, request) -> bool:
        # Tenant admins invite from the members page (/t/<slug>/members/), which answers
        # the same whether or not an account exists; attaching a named account directly
        # would tell them. Superusers see every account anyway.
        return request.user.is_superuser and super().has_add_permission(request)

    def has_change_permission(self, request, obj=None) -> bool:
        # Only owners touch owners' memberships.
        if (
            obj is not None
            and obj.role == Role.OWNER
            and not is_owner_of(request.user, obj.tenant_id)
        ):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.role == Role.OWNER:
            if not is_owner_of(request.user, obj.tenant_id):
                return False
            others = Membership.objects.filter(tenant_id=obj.tenant_id, role=Role.OWNER)
            if not others.exclude(pk=obj.pk).exists():
                return False  # the last owner stays
        return super().has_delete_permission(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        """Bulk delete keeps at least one owner per tenant, and only owners remove owners."""
        queryset = self.get_queryset(request).filter(pk__in=queryset.values("pk"))
        with transaction.atomic():
            for tenant_id in set(
                queryset.filter(role=Role.OWNER).values_list("tenant_id", flat=True)
            ):
                owners = Membership.objects.select_for_update().filter(
                    tenant_id=tenant_id, role=Role.OWNER
                )
                if (
                    not is_owner_of(request.user, tenant_id)
                    or not owners.exclude(pk__in=queryset.values("pk")).exists()
                ):
                    queryset = queryset.exclude(tenant_id=tenant_id, role=Role.OWNER)
                    messages.warning(
                        request,
                        "Owner memberships kept: only owners remove owners, "
                        "and a tenant keeps at least one.",
                    )
            super().delete_queryset(request, queryset)

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if obj.role in (Role.OWNER, Role.ADMIN) and not obj.user.is_staff:
            obj.user.is_staff = True
            obj.user.save(update_fields=["is_staff"])

    def formfield_for_choice_field(self, db_field, request, **kwargs):
        field = super().formfield_for_choice_field(db_field, request, **kwargs)
        if db_field.name == "role" and not request.user.is_superuser:
            owned = Membership.objects.filter(user=request.user, role=Role.OWNER).exists()
            if not owned:
                field.choices = [c for c in field.choices if c[0] != Role.OWNER]
        return field


class ApiKeyForm(TenantScopedForm):
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, widget=forms.CheckboxSelectMultiple, initial=[Scope.READ]
    )

    class Meta:
        model = ApiKey
        fields = [
            "tenant", "name", "scopes", "expires_at", "allowed_agents", "allowed_tools",
            "acts_for_members",
        ]  # fmt: skip
        help_texts = {
            "allowed_agents": "Comma-separated agent and crew slugs it may run. Empty: all.",
            "allowed_tools": "Comma-separated tool names it may execute. Empty: all.",
        }

    def clean_expires_at(self):
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and not self.instance.pk and expires_at <= timezone.now():
            raise ValidationError("Expiry must be in the future.")
        return expires_at


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    form = ApiKeyForm
    list_display = [
        "name",
        "prefix",
        "scopes",
        "role",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    readonly_fields = ["prefix", "role", "created_by", "created_at", "last_used_at", "revoked_at"]
    search_fields = ["name", "prefix"]
    actions = ["revoke"]

    def get_readonly_fields(self, request, obj=None):
        fields = super().get_readonly_fields(request, obj)
        # A key's powers are fixed at creation; revoke and create another to change them.
        fixed = ["scopes", "expires_at", "allowed_agents", "allowed_tools", "acts_for_members"]
        return [*fields, *fixed] if obj is not None else fields

    def save_model(self, request, obj, form, change) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        key, full_key = services.api_key_create(
            tenant=obj.tenant,
            name=obj.name,
            scopes=form.cleaned_data["scopes"],
            created_by=request.user,
            expires_at=obj.expires_at,
            allowed_agents=form.cleaned_data.get("allowed_agents"),
            allowed_tools=form.cleaned_data.get("allowed_tools"),
            acts_for_members=form.cleaned_data.get("acts_for_members", False),
        )
        obj.pk, obj.prefix, obj.created_at = key.pk, key.prefix, key.created_at
        obj._state.adding = False
        request._new_api_key = full_key

    def response_add(self, request, obj, post_url_continue=None):
        """Show the new key on this response only: never stored, never redirected with."""
        full_key = getattr(request, "_new_api_key", None)
        if full_key is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "title": "New API key",
            "opts": self.opts,
            "key": obj,
            "full_key": full_key,
        }
        response = render(request, "admin/tenancy/apikey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset) -> None:
        for key in queryset:
            services.api_key_revoke(key=key)
        messages.success(request, f"Revoked {queryset.count()} key(s).")


class IdentityProviderGroupInline(admin.TabularInline):
    """Group rules. A tenant's provider names its own tenant only (the model refuses
    others); tenant choices are the admin's tenants."""

    model = IdentityProviderGroup
    extra = 1

    def _may(self, request, parent) -> bool:
        if request.user.is_superuser:
            return True
        ids = admin_tenant_ids(request)
        return bool(ids) and (parent is None or parent.tenant_id in ids)

    def has_view_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    has_change_permission = has_delete_permission = has_view_permission

    def has_add_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name == "tenant" and not request.user.is_superuser:
            field.queryset = field.queryset.filter(pk__in=admin_tenant_ids(request))
        return field


@admin.register(IdentityProvider)
class IdentityProviderAdmin(TenantScopedAdmin):
    """A tenant's own identity providers (a superuser's also platform-wide ones). The client
    secret is write-only (EncryptedTextField): never shown back."""

    list_display = ["name", "slug", "issuer", "enabled"]
    search_fields = ["name", "slug", "issuer"]
    inlines = [IdentityProviderGroupInline]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    fields = [
        "tenant",
        "name",
        "slug",
        "enabled",
        "issuer",
        "client_id",
        "client_secret",
        "scopes",
        "groups_claim",
        "default_role",
    ]

    def save_model(self, request, obj, form, change) -> None:
        if obj.tenant_id is None and request.user.is_superuser:
            admin.ModelAdmin.save_model(self, request, obj, form, change)  # no tenant's log
            return
        super().save_model(request, obj, form, change)

    def delete_model(self, request, obj) -> None:
        if obj.tenant_id is None and request.user.is_superuser:
            admin.ModelAdmin.delete_model(self, request, obj)
            return
        super().delete_model(request, obj)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        if not request.user.is_superuser and "tenant" in form.base_fields:
            # only a superuser makes a platform-wide provider
            form.base_fields["tenant"].required = True
            form.base_fields["tenant"].empty_label = None
        return form


# They register the audit log and the configuration versions.
from agentplatform.tenancy import audit_admin, history_admin  # noqa: E402, F401
