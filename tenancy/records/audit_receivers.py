"""Audit entries for what no service of ours does: sign-ins (Django's auth signals),
per-object grants (guardian stores them as rows and sends no signals of its own), and
the purge of a deleted tenant's entries. Connected in TenancyConfig.ready()."""

from __future__ import annotations

from django.contrib.auth import get_user_model, user_logged_in, user_login_failed
from django.db.models.signals import post_delete, post_save, pre_delete
from django.dispatch import receiver
from guardian.models import GroupObjectPermission, UserObjectPermission

from tenancy import rls
from tenancy.models import AuditAction, Tenant
from tenancy.records import audit, history


def _active_tenant_ids(user) -> list[int]:
    with rls.owner():  # a sign-in is recorded in each of the user's tenants: keyed by the user
        return list(
            user.memberships.filter(tenant__active=True)
            .order_by("tenant_id")
            .values_list("tenant_id", flat=True)
        )


@receiver(user_logged_in)
def _signed_in(sender, request, user, **kwargs) -> None:
    tenant_ids = _active_tenant_ids(user)
    # single sign-on names its provider (agentplatform/web/sso/backend.py sets it)
    provider = getattr(user, "signed_in_with_provider", None)
    with rls.tenant_scope(*tenant_ids):  # before any tenant is chosen
        for tenant_id in tenant_ids:
            audit.record(
                tenant=tenant_id,
                action=AuditAction.SIGNIN_SUCCEEDED,
                actor=user,
                obj=user,
                request=request,
                details={"provider": provider} if provider else None,
            )


@receiver(user_login_failed)
def _sign_in_failed(sender, credentials, request=None, **kwargs) -> None:
    """For the tenants of the account named, if there is one; nothing otherwise. Django
    masks the password in `credentials`; only the name is read."""
    User = get_user_model()
    name = credentials.get(User.USERNAME_FIELD) or credentials.get("username")
    if not isinstance(name, str) or not name or "\x00" in name:
        return
    user = User._default_manager.filter(**{User.USERNAME_FIELD: name}).first()
    if user is None:
        return
    tenant_ids = _active_tenant_ids(user)
    with rls.tenant_scope(*tenant_ids):  # before any tenant is chosen
        for tenant_id in tenant_ids:
            audit.record(
                tenant=tenant_id,
                action=AuditAction.SIGNIN_FAILED,
                actor=f"{audit.text(name, 150)} (not signed in)",
                obj=user,
                request=request,
            )


@receiver(post_save, sender=UserObjectPermission)
@receiver(post_save, sender=GroupObjectPermission)
@receiver(post_delete, sender=UserObjectPermission)
@receiver(post_delete, sender=GroupObjectPermission)
def _object_permission(sender, instance, signal, created: bool = False, **kwargs) -> None:
    """assign_perm creates a row, remove_perm deletes it. Only objects of a tenant are
    logged, in that tenant. One query for the object (and for the permission)."""
    if signal is post_save and not created:
        return  # a re-saved grant is not a new one
    obj = instance.content_object
    tenant_id = getattr(obj, "tenant_id", None)
    if obj is None or tenant_id is None:
        return
    grantee = getattr(instance, "user", None) or getattr(instance, "group", None)
    audit.record_grant(
        tenant=tenant_id,
        added=signal is post_save,
        permission=instance.permission.codename,
        obj=obj,
        grantee=grantee,
    )
    history.record(obj)  # grants are part of the object's versions (a no-op if unversioned)


@receiver(pre_delete, sender=Tenant)
def _tenant_deleted(sender, instance: Tenant, **kwargs) -> None:
    # Django sends pre_delete inside the deletion's transaction, before the cascade
    # reaches the audit entries: the trigger then lets exactly this tenant's go.
    audit.allow_purge(instance.pk)
