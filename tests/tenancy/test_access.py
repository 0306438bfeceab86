from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import Http404

from providers.models import ProviderConnection
from tenancy import access
from tenancy.models import Role
from tests.factories import add_member, make_connection, make_user
from tests.scoping.models import Project


def test_member_resolves_to_their_membership(trio):
    membership = access.membership_for(trio.bob, "acme")
    assert membership.tenant == trio.acme
    assert membership.role == Role.MEMBER


def test_outsider_unknown_and_anonymous_get_404(trio):
    with pytest.raises(Http404):
        access.membership_for(trio.charlie, "acme")
    with pytest.raises(Http404):
        access.membership_for(trio.alice, "no-such-tenant")
    with pytest.raises(Http404):
        access.membership_for(AnonymousUser(), "acme")


def test_inactive_tenant_is_invisible(trio):
    trio.acme.active = False
    trio.acme.save()
    with pytest.raises(Http404):
        access.membership_for(trio.alice, "acme")
    assert list(access.tenants_for(trio.alice)) == []


def test_roles_rank_owner_over_admin_over_member_over_viewer(trio):
    viewer = make_user("victor")
    membership = add_member(trio.acme, viewer, Role.VIEWER)
    access.require_role(membership, Role.VIEWER)
    with pytest.raises(PermissionDenied):
        access.require_role(membership, Role.MEMBER)
    owner = access.membership_for(trio.alice, "acme")
    for role in Role.values:
        access.require_role(owner, role)
    with pytest.raises(PermissionDenied):
        access.require_role(access.membership_for(trio.bob, "acme"), Role.ADMIN)


def test_it_returns_404_for_another_tenants_object(trio):
    theirs = Project.objects.create(tenant=trio.globex, name="secret plans")
    ours = Project.objects.create(tenant=trio.acme, name="roadmap")
    assert access.get_for_tenant(Project, trio.acme, pk=ours.pk) == ours
    with pytest.raises(Http404):
        access.get_for_tenant(Project, trio.acme, pk=theirs.pk)
    with pytest.raises(Http404):
        access.get_for_tenant(Project.objects.all(), trio.acme, pk=10**9)


def test_viewer_may_read_but_not_write(trio):
    ours = Project.objects.create(tenant=trio.acme, name="roadmap")
    viewer = add_member(trio.acme, make_user("victor"), Role.VIEWER)
    assert access.get_for_tenant(Project, viewer.tenant, pk=ours.pk) == ours
    with pytest.raises(PermissionDenied):
        access.get_for_write(Project, viewer, pk=ours.pk)
    member = access.membership_for(trio.bob, "acme")
    assert access.get_for_write(Project, member, pk=ours.pk) == ours
    outsider = access.membership_for(trio.charlie, "globex")
    with pytest.raises(Http404):  # 404 wins over 403: other tenants' ids disclose nothing
        access.get_for_write(Project, outsider, pk=ours.pk)


def test_administered_tenants_are_owner_and_admin_roles_only(trio):
    assert access.administered_tenant_ids(trio.alice) == {trio.acme.pk}
    assert access.administered_tenant_ids(trio.bob) == set()
    add_member(trio.globex, trio.bob, Role.ADMIN)
    assert access.administered_tenant_ids(trio.bob) == {trio.globex.pk}


def test_filter_given_leaves_out_only_the_filters_not_given(trio):
    """None means any; False (and any other falsy value) still filters."""
    make_connection(trio.acme, "Default", "openai", is_default=True)
    make_connection(trio.acme, "Other", "anthropic", is_default=False)
    connections = ProviderConnection.objects.filter(tenant=trio.acme).order_by("name")

    def names(**lookups) -> list[str]:
        return [c.name for c in access.filter_given(connections, **lookups)]

    assert names(is_default=None, kind=None) == ["Default", "Other"]
    assert names(is_default=False, kind=None) == ["Other"]
    assert names(is_default=True, kind="openai") == ["Default"]
    assert names(is_default=True, kind="anthropic") == []
