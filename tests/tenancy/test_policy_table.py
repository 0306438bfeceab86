"""docs/security.md prints the policy table; it must say what `POLICY` does."""

from __future__ import annotations

import re
from pathlib import Path

from tenancy.models import ApiKey, Role, Scope, Tenant
from tenancy.policy import POLICY, Action, Principal

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_the_documented_table_is_the_policy():
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| `(\w+)` \|", DOC.read_text(), re.MULTILINE)
    documented = {action: (role, scope) for action, role, scope in rows}
    actual = {a.value: (r.role.value, r.scope.value) for a, r in POLICY.items()}
    assert documented == actual
    assert set(POLICY) == set(Action)


def test_a_key_never_exceeds_its_creators_role():
    tenant = Tenant(slug="t", name="T")
    key = ApiKey(tenant=tenant, name="k", scopes=[Scope.ADMIN], role=Role.MEMBER)
    principal = Principal.of_key(key)
    assert principal.may(Action.START_RUN) and principal.may(Action.WRITE_DATA)
    assert not principal.may(Action.CHANGE_CONFIG) and not principal.may(Action.MANAGE_KEYS)
    admin_key = ApiKey(tenant=tenant, name="k", scopes=[Scope.READ, Scope.WRITE], role=Role.ADMIN)
    assert not Principal.of_key(admin_key).may(Action.CHANGE_CONFIG)  # write is data only
