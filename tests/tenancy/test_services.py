from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from tenancy import services
from tenancy.models import Membership, Role, Tenant
from tests.factories import add_member, make_user


@pytest.mark.django_db
def test_tenant_slug_is_validated_and_unique():
    services.tenant_create(slug="acme", name="Acme")
    with pytest.raises(ValidationError):
        services.tenant_create(slug="acme", name="Again")
    with pytest.raises(ValidationError):
        services.tenant_create(slug="Not A Slug!", name="Bad")
    assert Tenant.objects.count() == 1


def test_membership_is_unique_per_pair_and_role_changes_in_place(trio):
    add_member(trio.acme, trio.bob, Role.ADMIN)
    assert Membership.objects.filter(tenant=trio.acme, user=trio.bob).count() == 1
    assert Membership.objects.get(tenant=trio.acme, user=trio.bob).role == Role.ADMIN
    trio.bob.refresh_from_db()
    assert trio.bob.is_staff  # admins get the (tenant-scoped) admin


def test_the_last_owner_can_be_neither_demoted_nor_removed(trio):
    owner = Membership.objects.get(tenant=trio.acme, user=trio.alice)
    with pytest.raises(ValidationError):
        services.membership_set(tenant=trio.acme, user=trio.alice, role=Role.MEMBER)
    with pytest.raises(ValidationError):
        services.membership_remove(membership=owner)
    add_member(trio.acme, make_user("olga"), Role.OWNER)
    services.membership_set(tenant=trio.acme, user=trio.alice, role=Role.MEMBER)
    assert Membership.objects.get(pk=owner.pk).role == Role.MEMBER


def test_unknown_role_is_refused(trio):
    with pytest.raises(ValidationError):
        services.membership_set(tenant=trio.acme, user=trio.bob, role="emperor")


def test_accounts_that_must_not_join_are_refused(trio):
    from guardian.utils import get_anonymous_user

    anonymous = get_anonymous_user()
    ghost = make_user("ghost", is_active=False)
    root = make_user("root", is_superuser=True, is_staff=True)
    for user, added_by in ((anonymous, None), (ghost, None), (root, trio.alice)):
        with pytest.raises(ValidationError, match="cannot be a member"):
            services.membership_set(tenant=trio.acme, user=user, role=Role.ADMIN, added_by=added_by)
    assert not Membership.objects.filter(user__in=[anonymous, ghost, root]).exists()
    # A superuser (or the platform itself) may add a superuser.
    services.membership_set(tenant=trio.acme, user=root, role=Role.MEMBER, added_by=root)
    assert Membership.objects.filter(tenant=trio.acme, user=root).exists()
