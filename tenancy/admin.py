from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models, transaction
from django.db.models import Q
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.utils import timezone
from guardian.conf import settings as guardian_settings

from tenancy import services
from tenancy.admin_site import admin_tenant_ids
from tenancy.models import (
    ApiKey,
    IdentityProvider,
    IdentityProviderGroup,
    Membership,
    Role,
    Scope,
    Tenant,
)
from tenancy.policy import Principal
from tenancy.scoped_admin import HiddenRowsAre404, TenantScopedAdmin, TenantScopedForm
from tenancy.sign_in import session_needs_password_sign_in
from tenancy.sign_on import identity_providers
from tenancy.sign_on.identity_providers import RuleSpec, grants_owner


@admin.register(Tenant)
class TenantAdmin(HiddenRowsAre404, admin.ModelAdmin):
    list_display = ["name", "slug", "active", "password_sign_in", "time_zone", "created_at"]
    search_fields = ["name", "slug"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        password_session = session_needs_password_sign_in(request)

        class PasswordOffChecked(form):
            def clean(self):
                cleaned = super().clean()
                turning_off = "password_sign_in" in self.changed_data and not cleaned.get(
                    "password_sign_in", True
                )
                if turning_off and self.instance.pk:
                    try:
                        services.check_password_sign_in_off(
                            tenant=self.instance, password_session=password_session
                        )
                    except ValidationError as error:
                        self.add_error("password_sign_in", error)
                return cleaned

        return PasswordOffChecked

    # Settings with a service of their own (checked under the tenant row's lock, audited):
    # the admin changes them through it, as the pages, REST and the config import do.
    SETTING_SERVICES = {
        "password_sign_in": services.tenant_sign_in_set,
        "time_zone": services.tenant_time_zone_set,
        "require_confirmation_for_writes": services.tenant_policy_set,
    }

    def save_model(self, request, obj, form, change):
        if not change:
            return super().save_model(request, obj, form, change)
        settings_changed = {
            name: getattr(obj, name) for name in form.changed_data if name in self.SETTING_SERVICES
        }
        others = [name for name in form.changed_data if name not in self.SETTING_SERVICES]
        if others:
            obj.save(update_fields=others)
        stored = Tenant.objects.get(pk=obj.pk)
        password_session = session_needs_password_sign_in(request)
        for name, value in settings_changed.items():
            setattr(obj, name, getattr(stored, name))
            how = {"password_session": password_session} if name == "password_sign_in" else {}
            try:
                self.SETTING_SERVICES[name](tenant=obj, **{name: value}, **how)
            except ValidationError as error:  # (changed since the form was checked)
                self.message_user(request, " ".join(error.messages), level=messages.ERROR)

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
    """Memberships are written through the tenancy services, as on every other face: the
    same rules (only owners touch owners, the last owner stays), the same audit entries,
    and a removal revokes the keys the member made (`membership_remove`). A refusal the
    services make after the form validated comes back as a message."""

    form = MembershipForm
    list_display = ["user", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "user__email"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.requesting_user = request.user
        return form

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None:
            fields.append("user")  # a membership is one person's: change the role, or remove
        return fields

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
        """Bulk delete keeps at least one owner per tenant (its owners stay together), and
        only owners remove owners; each removal through `membership_remove`."""
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
            for membership in queryset.select_related("tenant", "user"):
                self.delete_model(request, membership)

    def delete_model(self, request, obj) -> None:
        if not self._may(request, obj):
            raise PermissionDenied
        services.membership_remove(membership=obj, by=_admin_principal(request, obj.tenant))

    def save_model(self, request, obj, form, change) -> None:
        if not self._may(request, obj):
            raise PermissionDenied
        saved = services.membership_set(
            tenant=obj.tenant,
            user=obj.user,
            role=obj.role,
            added_by=request.user,
            by=_admin_principal(request, obj.tenant),
        )
        obj.pk, obj.created_at = saved.pk, saved.created_at
        obj._state.adding = False

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return _refusals_as_messages(
            request, super().changeform_view, request, object_id, form_url, extra_context
        )

    def delete_view(self, request, object_id, extra_context=None):
        return _refusals_as_messages(
            request, super().delete_view, request, object_id, extra_context
        )

    def changelist_view(self, request, extra_context=None):
        return _refusals_as_messages(request, super().changelist_view, request, extra_context)

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
        "acts_as",
        "made_by",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    readonly_fields = [
        "prefix",
        "role",
        "acts_as",
        "created_by",
        "created_by_key",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    search_fields = ["name", "prefix"]
    actions = ["revoke"]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("created_by", "created_by_key")
            .with_creator_standing()
        )

    @admin.display(description="made by")
    def made_by(self, obj: ApiKey) -> str:
        return obj.made_by

    @admin.display(description="acts as")
    def acts_as(self, obj: ApiKey) -> str:
        """Its role now: capped by its creator's current role; unusable once they left."""
        if obj.pk is None:
            return "-"
        role = obj.effective_role
        return "unusable: its creator is no longer a member" if role is None else role

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

    def formfield_for_choice_field(self, db_field, request, **kwargs):
        field = super().formfield_for_choice_field(db_field, request, **kwargs)
        return _without_owner_unless_owner(field, db_field, request)


def _admin_principal(request, tenant: Tenant) -> Principal:
    """Who acts in the admin for `tenant`: a superuser as an owner, else their membership."""
    if request.user.is_superuser:
        return Principal(tenant=tenant, role=Role.OWNER, user=request.user)
    return Principal.for_initiator(tenant, request.user)


def _rules_from(formsets) -> list[RuleSpec]:
    """The group rules the inline forms leave (without the deleted and the empty ones)."""
    rules = []
    for formset in formsets:
        for form in formset.forms:
            data = getattr(form, "cleaned_data", None) or {}
            if data.get("group") and not data.get("DELETE"):
                rules.append(RuleSpec(group=data["group"], role=data.get("role") or Role.MEMBER))
    return rules


@admin.register(IdentityProvider)
class IdentityProviderAdmin(TenantScopedAdmin):
    """A tenant's own identity providers (a superuser's also platform-wide ones). The client
    secret is write-only (EncryptedTextField): never shown back.

    A tenant's provider is written through the services of REST
    (tenancy/identity_providers.py): the same rules (only owners touch a provider giving
    the owner role; the last one serving a tenant without passwords stays) and the same
    audit entries, its group rules included. A refusal comes back as a message."""

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

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.tenant_id is not None:
            fields.append("slug")  # fixed once made (identity_providers.SLUG_FIXED)
        return fields

    def get_fields(self, request, obj=None):
        # Without the tenant where it is implied (a one-tenant admin adding one): a form
        # shown again with its errors would otherwise name a field it does not have.
        excluded = self.get_exclude(request, obj) or []
        return [name for name in super().get_fields(request, obj) if name not in excluded]

    @staticmethod
    def _platform_wide(request, obj) -> bool:
        return obj.tenant_id is None and request.user.is_superuser

    def _owners_only(self, request, obj) -> bool:
        """A provider giving the owner role, which this admin may not touch."""
        if obj is None or obj.tenant_id is None or request.user.is_superuser:
            return False
        return grants_owner(obj) and not _admin_principal(request, obj.tenant).is_owner

    def has_change_permission(self, request, obj=None) -> bool:
        return super().has_change_permission(request, obj) and not self._owners_only(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return super().has_delete_permission(request, obj) and not self._owners_only(request, obj)

    def save_model(self, request, obj, form, change) -> None:
        if self._platform_wide(request, obj):
            admin.ModelAdmin.save_model(self, request, obj, form, change)  # no tenant's log
        # A tenant's provider is saved with its rules, in save_related.

    def save_related(self, request, form, formsets, change) -> None:
        obj = form.instance
        if self._platform_wide(request, obj):
            admin.ModelAdmin.save_related(self, request, form, formsets, change)
            return
        identity_providers.identity_provider_save(
            by=_admin_principal(request, obj.tenant),
            provider=obj,
            changes={},
            rules=_rules_from(formsets),
        )
        for formset in formsets:  # what the admin's change message reads
            formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []

    def delete_model(self, request, obj) -> None:
        if self._platform_wide(request, obj):
            admin.ModelAdmin.delete_model(self, request, obj)
            return
        identity_providers.identity_provider_delete(
            by=_admin_principal(request, obj.tenant), provider=obj
        )

    def delete_queryset(self, request, queryset) -> None:
        with transaction.atomic():
            for obj in self.get_queryset(request).filter(pk__in=queryset.values("pk")):
                self.delete_model(request, obj)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return _refusals_as_messages(
            request, super().changeform_view, request, object_id, form_url, extra_context
        )

    def delete_view(self, request, object_id, extra_context=None):
        return _refusals_as_messages(
            request, super().delete_view, request, object_id, extra_context
        )

    def changelist_view(self, request, extra_context=None):
        return _refusals_as_messages(request, super().changelist_view, request, extra_context)

    def formfield_for_choice_field(self, db_field, request, **kwargs):
        field = super().formfield_for_choice_field(db_field, request, **kwargs)
        return _without_owner_unless_owner(field, db_field, request)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        if not request.user.is_superuser and "tenant" in form.base_fields:
            # only a superuser makes a platform-wide provider
            form.base_fields["tenant"].required = True
            form.base_fields["tenant"].empty_label = None
        return form


def _refusals_as_messages(request, view, *args):
    """A rule the services refuse after the forms validated (the whole save undone: the
    admin's views run in one transaction), as a message on the page again."""
    try:
        return view(*args)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return HttpResponseRedirect(request.get_full_path())


def _without_owner_unless_owner(field, db_field, request):
    """Role choices without "owner" for someone who owns no tenant (the services refuse it
    anyway; this keeps the form from offering it)."""
    limited = db_field.name in ("role", "default_role") and not request.user.is_superuser
    if limited and not Membership.objects.filter(user=request.user, role=Role.OWNER).exists():
        field.choices = [c for c in field.choices if c[0] != Role.OWNER]
    return field


# They register the audit log and the configuration versions.
from tenancy.records import audit_admin, history_admin  # noqa: E402, F401
