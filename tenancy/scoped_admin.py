"""The base ModelAdmin for every tenant-owned model.

Superusers see everything. A tenant owner/admin sees and edits only rows of the tenants
they administer: querysets are filtered, foreign-key and many-to-many choices are
limited to those tenants, related rows must belong to the row's own tenant, the tenant
is set on save when they administer one tenant, and a saved row's tenant is read-only
for everyone (moving rows between tenants would orphan their relations).

Permissions for tenant admins come from their role, not from Django model permissions.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.db import models, transaction
from django.http import Http404, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import urlencode

from base.config_checks import refusals_to_delete
from tenancy.admin_site import admin_tenant_ids
from tenancy.models import Tenant
from tenancy.records import audit, history


def _is_tenant_owned(model: type[models.Model]) -> bool:
    try:
        field = model._meta.get_field("tenant")
    except Exception:  # FieldDoesNotExist
        return False
    return field.is_relation and field.related_model is Tenant


class TenantScopedForm(forms.ModelForm):
    """Refuses related rows from another tenant than the row's own."""

    admin_tenant: Tenant | None = None  # set by TenantScopedAdmin when it is implied

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.admin_tenant is not None and self.instance.tenant_id is None:
            self.instance.tenant = self.admin_tenant

    def _get_validation_exclusions(self) -> set[str]:
        # The tenant is set even where the form hides it; keep (tenant, name)-style unique
        # constraints checked so a duplicate is a form error, not an IntegrityError.
        exclude = super()._get_validation_exclusions()
        if self.instance.tenant_id is not None:
            exclude.discard("tenant")
        return exclude

    def clean(self) -> dict:
        cleaned = super().clean()
        tenant = cleaned.get("tenant") or (
            self.instance.tenant if self.instance.tenant_id else None
        )
        if tenant is None:
            return cleaned
        for name, value in list(cleaned.items()):
            if name == "tenant" or value is None:
                continue
            values = value if isinstance(value, models.QuerySet | list | tuple) else [value]
            for item in values:
                owned = isinstance(item, models.Model) and _is_tenant_owned(type(item))
                if owned and item.tenant_id != tenant.pk:
                    self.add_error(name, "Choose one of this tenant's own rows.")
                    break
        return cleaned


def limit_choices(field, related, ids: set[int] | None) -> None:
    """Relation choices within the admin's tenants: rows of those tenants, and users who
    are members of them (never the whole user table). `ids` None means unrestricted."""
    if field is None or ids is None or not hasattr(field, "queryset"):
        return
    if related is Tenant:
        field.queryset = field.queryset.filter(pk__in=ids)
    elif _is_tenant_owned(related):
        field.queryset = field.queryset.filter(tenant_id__in=ids)
    elif related is get_user_model():
        field.queryset = field.queryset.filter(memberships__tenant_id__in=ids).distinct()


class HiddenRowsAre404:
    """Rows outside get_queryset answer 404, not the admin's "doesn't exist" redirect."""

    def _object_or_404(self, request, object_id) -> None:
        if object_id and self.get_object(request, unquote(object_id)) is None:
            raise Http404(f"No such {self.opts.verbose_name}.")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        self._object_or_404(request, object_id)
        return super().change_view(request, object_id, form_url, extra_context)

    def delete_view(self, request, object_id, extra_context=None):
        self._object_or_404(request, object_id)
        return super().delete_view(request, object_id, extra_context)

    def history_view(self, request, object_id, extra_context=None):
        self._object_or_404(request, object_id)
        return super().history_view(request, object_id, extra_context)


class TenantScopedAdmin(HiddenRowsAre404, admin.ModelAdmin):
    form = TenantScopedForm

    def __init__(self, model, admin_site) -> None:
        super().__init__(model, admin_site)
        if "tenant" in self.list_editable:  # that formset would bypass the scoped form
            raise ImproperlyConfigured(f"{type(self).__name__}: tenant cannot be list_editable")

    # -- who may do what ---------------------------------------------------------
    def _tenant_ids(self, request) -> set[int] | None:
        """None means unrestricted (superuser)."""
        return None if request.user.is_superuser else admin_tenant_ids(request)

    def _may(self, request, obj) -> bool:
        ids = self._tenant_ids(request)
        if ids is None:
            return True
        return bool(ids) and (obj is None or obj.tenant_id in ids)

    def has_module_permission(self, request) -> bool:
        return self._may(request, None)

    def has_view_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    def has_change_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    def has_add_permission(self, request) -> bool:
        return self._may(request, None)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    # -- what they see -------------------------------------------------------------
    def get_queryset(self, request):
        queryset = super().get_queryset(request).select_related("tenant")
        ids = self._tenant_ids(request)
        return queryset if ids is None else queryset.filter(tenant_id__in=ids)

    def get_list_display(self, request):
        display = list(super().get_list_display(request))
        ids = self._tenant_ids(request)
        if "tenant" not in display and (ids is None or len(ids) > 1):
            display.append("tenant")
        return display

    def get_list_filter(self, request):
        """Relation filters offer only values present in the scoped rows, so a filter
        sidebar never lists another tenant (or its rows)."""
        filters = [f for f in super().get_list_filter(request) if f != "tenant"]
        ids = self._tenant_ids(request)
        if ids is None or len(ids) > 1:
            filters.append("tenant")
        if ids is None:
            return filters
        scoped = []
        for item in filters:
            if isinstance(item, str) and self._is_relation_path(item):
                scoped.append((item, admin.RelatedOnlyFieldListFilter))
            else:
                scoped.append(item)
        return scoped

    def _is_relation_path(self, path: str) -> bool:
        from django.contrib.admin.utils import get_fields_from_path

        try:
            return get_fields_from_path(self.model, path)[-1].is_relation
        except Exception:  # not a model field path (a callable or a custom filter)
            return False

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and "tenant" not in fields:
            fields.append("tenant")
        return fields

    def get_exclude(self, request, obj=None):
        exclude = list(super().get_exclude(request, obj) or [])
        if obj is None and self._implied_tenant(request) is not None:
            exclude.append("tenant")
        return exclude

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        implied = self._implied_tenant(request) if obj is None else None
        return type(form.__name__, (form,), {"admin_tenant": implied})

    def _implied_tenant(self, request) -> Tenant | None:
        """The one tenant a single-tenant admin works in; read once per request (the form,
        its exclusions and fieldsets all ask)."""
        ids = self._tenant_ids(request)
        if ids is None or len(ids) != 1:
            return None
        if getattr(request, "_implied_tenant", None) is None:
            request._implied_tenant = Tenant.objects.get(pk=next(iter(ids)))
        return request._implied_tenant

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        self._limit_choices(field, db_field, request)
        return field

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        field = super().formfield_for_manytomany(db_field, request, **kwargs)
        self._limit_choices(field, db_field, request)
        return field

    def _limit_choices(self, field, db_field, request) -> None:
        limit_choices(field, db_field.related_model, self._tenant_ids(request))

    # -- the last wall -------------------------------------------------------------
    def save_model(self, request, obj, form, change) -> None:
        if not self._may(request, obj):
            raise PermissionDenied
        stored = audit.stored_state(obj)  # the form has changed `obj` already
        super().save_model(request, obj, form, change)
        audit.record_saved(obj, stored, actor=request.user, request=request)

    def history_view(self, request, object_id, extra_context=None):
        """A versioned object's "History" button shows its configuration versions."""
        kind = history.kind_of(self.model)
        if kind is None:
            return super().history_view(request, object_id, extra_context)
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not self.has_view_or_change_permission(request, obj):
            raise Http404("No such object.")
        url = reverse("admin:tenancy_configversion_changelist")
        query = urlencode({"object_type": kind.label, "object_id": obj.pk})
        return HttpResponseRedirect(f"{url}?{query}")

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        # After the inlines (a crew's members), in the admin's transaction: the new version.
        history.record(form.instance, actor=request.user, request=request)

    def get_deleted_objects(self, objs, request):
        """What another app's delete check refuses (`base.config_checks`: a workflow names
        this tool) is listed as protected: the admin's confirmation page says why, and
        neither it nor the bulk action deletes anything."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        refused = [f"{obj}: {reason}" for obj in objs for reason in refusals_to_delete(obj)]
        return deleted, counts, perms_needed, [*protected, *refused]

    def delete_model(self, request, obj) -> None:
        if not self._may(request, obj):
            raise PermissionDenied
        audit.record_deleted(obj, actor=request.user, request=request)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        ids = self._tenant_ids(request)
        if ids is not None:
            queryset = queryset.filter(tenant_id__in=ids)
        with transaction.atomic():  # the entries and the deletion together
            for obj in queryset:
                audit.record_deleted(obj, actor=request.user, request=request)
            super().delete_queryset(request, queryset)


class TenantScopedInline(admin.TabularInline):
    """Inline rows of a tenant-scoped parent: relation choices limited like the parent's,
    and each new row takes the parent's tenant."""

    def _tenant_ids(self, request) -> set[int] | None:
        return None if request.user.is_superuser else admin_tenant_ids(request)

    def _may(self, request, parent) -> bool:
        ids = self._tenant_ids(request)
        return ids is None or (bool(ids) and (parent is None or parent.tenant_id in ids))

    def has_view_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    def has_add_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    def has_change_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self._may(request, obj)

    def get_exclude(self, request, obj=None):
        return [*(super().get_exclude(request, obj) or []), "tenant"]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        limit_choices(field, db_field.related_model, self._tenant_ids(request))
        return field

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        field = super().formfield_for_manytomany(db_field, request, **kwargs)
        limit_choices(field, db_field.related_model, self._tenant_ids(request))
        return field

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)

        class ParentTenantFormSet(formset):
            def save_new(self, form, commit=True):
                form.instance.tenant_id = self.instance.tenant_id  # the saved parent's
                return super().save_new(form, commit)

        return ParentTenantFormSet


class ReadOnlyAdmin:
    """Mixed in before a ModelAdmin whose rows the platform writes (log entries, versions,
    runs, chunks...): the admin shows them, never adds, changes or deletes one."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
