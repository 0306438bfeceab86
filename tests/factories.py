"""Small factories for tests: real rows through the real services."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from agentplatform.tenancy import services
from agentplatform.tenancy.models import Membership, Role, Tenant

PASSWORD = "correct horse battery staple"


def make_user(username: str, **extra):
    return get_user_model().objects.create_user(
        username=username, email=f"{username}@example.test", password=PASSWORD, **extra
    )


def make_tenant(slug: str, owner=None) -> Tenant:
    return services.tenant_create(slug=slug, name=slug.title(), owner=owner)


def add_member(tenant: Tenant, user, role: str = Role.MEMBER) -> Membership:
    return services.membership_set(tenant=tenant, user=user, role=role)
