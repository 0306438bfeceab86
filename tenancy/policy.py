"""Who may do what in a tenant: one table, asked by every entry point.

Whoever acts is a `Principal`: a session user with the role of their membership, or an
API key with its scopes, never beyond the role its creator had when the key was made
(`ApiKey.role`) nor the role they have now (`ApiKey.effective_role`). REST, `/v1`, MCP,
the web pages, the Django admin and the services that they call all ask `Principal.may` /
`Principal.require` with an `Action` of `POLICY`; rules about particular objects (which
runs one sees, which agents one may start, who decides an approval) follow in
`agents.access`, on top of the action's rule.

`docs/security.md` prints this table; a test checks the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import Http404

from tenancy.models import ROLE_RANK, ApiKey, Membership, Role, Scope, Tenant


class Action(StrEnum):
    READ_CONFIG = "read_config"
    CHANGE_CONFIG = "change_config"
    MANAGE_MEMBERS = "manage_members"
    MANAGE_KEYS = "manage_keys"
    READ_DATA = "read_data"
    WRITE_DATA = "write_data"
    START_RUN = "start_run"
    READ_RUN = "read_run"
    CANCEL_RUN = "cancel_run"
    RESUME_RUN = "resume_run"
    VERIFY_RUN = "verify_run"
    DECIDE_APPROVAL = "decide_approval"
    EXECUTE_TOOL = "execute_tool"
    READ_USAGE = "read_usage"
    READ_AUDIT = "read_audit"
    OVERRIDE_EVALUATION = "override_evaluation"
    MANAGE_RETENTION = "manage_retention"
    EXPORT_TENANT = "export_tenant"


@dataclass(frozen=True)
class Rule:
    role: Role  # session users need at least this role; a key's `role` must reach it too
    scope: Scope  # API keys need this scope (`admin` includes every other)
    objects: str = ""  # the per-object rule that follows (agents.access), for the docs


POLICY: dict[Action, Rule] = {
    Action.READ_CONFIG: Rule(Role.VIEWER, Scope.READ),
    Action.CHANGE_CONFIG: Rule(
        Role.ADMIN, Scope.CONFIG, "tools, provider and MCP connections, agents, crews, "
        "workflows, knowledge-base settings, skills (install, approve); a tenant tool never "
        "takes a built-in's name",
    ),
    Action.MANAGE_MEMBERS: Rule(Role.ADMIN, Scope.ADMIN, "only an owner makes or changes owners"),
    Action.MANAGE_KEYS: Rule(Role.ADMIN, Scope.ADMIN, "a new key's role is its creator's"),
    Action.READ_DATA: Rule(
        Role.VIEWER, Scope.READ, "conversations and a person's remembered facts are their "
        "owner's alone (admins also see the shared facts: an agent's, the tenant's, keys'; "
        "a key its own; an admin-scope key every fact, to honour erasure requests)",
    ),
    Action.WRITE_DATA: Rule(
        Role.MEMBER, Scope.WRITE, "conversations, documents, facts; the owner's own"
    ),
    Action.START_RUN: Rule(
        Role.MEMBER, Scope.RUN, "an agent or crew with use grants only for its grantees and "
        "admins; a crew needs the use of each member; a key limited to agents only those",
    ),
    Action.READ_RUN: Rule(
        Role.VIEWER, Scope.READ, "admins (and keys made by one) see every run; others the "
        "runs they started, with their child runs",
    ),
    Action.CANCEL_RUN: Rule(Role.MEMBER, Scope.RUN, "the run's starter, or an admin"),
    Action.RESUME_RUN: Rule(
        Role.MEMBER, Scope.RUN, "a failed run: its starter, or an admin; either must still "
        "be allowed to use its agent",
    ),
    Action.VERIFY_RUN: Rule(
        Role.MEMBER, Scope.RUN, "a succeeded run's outcome: its starter, or an admin"
    ),
    Action.DECIDE_APPROVAL: Rule(
        Role.MEMBER, Scope.RUN, "per agent: admins only, the run's starter (and admins), or "
        "a group's members; optionally never the run's starter",
    ),
    Action.EXECUTE_TOOL: Rule(Role.MEMBER, Scope.RUN, "a key limited to tools only those"),
    Action.READ_USAGE: Rule(Role.VIEWER, Scope.READ, "admins see everyone's; others their own"),
    Action.READ_AUDIT: Rule(Role.ADMIN, Scope.ADMIN),
    Action.OVERRIDE_EVALUATION: Rule(
        Role.ADMIN, Scope.ADMIN, "publish an agent's draft that did not pass its required "
        "evaluation, with a reason (audit log); proposing a change is `change_config`; also "
        "lowering or removing a required evaluation (audited)",
    ),
    Action.MANAGE_RETENTION: Rule(
        Role.ADMIN, Scope.ADMIN, "how long runs' events, conversations, attachments and audit "
        "entries are kept, and legal holds (read and change: docs/operations.md, Retention)",
    ),
    Action.EXPORT_TENANT: Rule(
        Role.OWNER, Scope.ADMIN, "the whole workspace's archive: asked for, followed and "
        "downloaded by owners only (docs/operations.md, Offboarding)",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Principal:
    """Who acts in `tenant`: a user (`role` from the membership) or an API key (`role` is
    the key's effective role: its cap, lowered to its creator's current role). Build one
    with `of_membership`, `of_key` or `for_initiator`."""

    tenant: Tenant
    role: str
    user: AbstractBaseUser | None = None
    api_key: ApiKey | None = None
    scopes: frozenset[str] = field(default=frozenset())

    @classmethod
    def of_membership(
        cls, membership: Membership, user: AbstractBaseUser | None = None
    ) -> Principal:
        """`user` (the membership's, if already loaded) saves a query."""
        user = user if user is not None else membership.user
        return cls(tenant=membership.tenant, role=membership.role, user=user)

    @classmethod
    def of_key(cls, key: ApiKey) -> Principal:
        """No query for a key `find_usable_key` gave; one for a key loaded otherwise (its
        creator's role). A key whose creator is gone may do nothing (no scope)."""
        role = key.effective_role
        if role is None:
            return cls(tenant=key.tenant, role=Role.VIEWER, api_key=key)
        return cls(tenant=key.tenant, role=role, api_key=key, scopes=frozenset(key.scopes))

    @classmethod
    def for_initiator(cls, tenant: Tenant, who: AbstractBaseUser | ApiKey) -> Principal:
        """The principal of a user or key acting in `tenant`; 404 for a user who is not a
        member (a platform superuser acts as an owner) or another tenant's key. One query
        for a user, none for a key."""
        if isinstance(who, ApiKey):
            if who.tenant_id != tenant.pk:
                raise Http404("No such tenant.")
            return cls.of_key(who)
        membership = Membership.objects.filter(tenant=tenant, user=who).first()
        if membership is not None:
            membership.tenant = tenant
            return cls.of_membership(membership, who)
        if getattr(who, "is_superuser", False) and who.is_active:
            return cls(tenant=tenant, role=Role.OWNER, user=who)
        raise Http404("No such tenant.")

    @property
    def initiator(self) -> AbstractBaseUser | ApiKey:
        return self.api_key if self.api_key is not None else self.user

    @property
    def label(self) -> str:
        if self.api_key is not None:
            return f"API key {self.api_key.name}"
        return self.user.get_username() if self.user is not None else "platform"

    def has_role(self, role: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]

    def has_scope(self, scope: str) -> bool:
        if self.api_key is None:
            return True
        return scope in self.scopes or Scope.ADMIN in self.scopes

    def may(self, action: Action) -> bool:
        rule = POLICY[action]
        return self.has_role(rule.role) and self.has_scope(rule.scope)

    def require(self, action: Action) -> None:
        """PermissionDenied (403) naming what is missing, unless `may(action)`."""
        rule = POLICY[action]
        if self.api_key is not None and not self.has_scope(rule.scope):
            raise PermissionDenied(f"This API key lacks the {str(rule.scope)!r} scope.")
        if not self.has_role(rule.role):
            raise PermissionDenied(
                f"This needs the {Role(rule.role).label.lower()} role or higher."
            )

    @property
    def is_admin(self) -> bool:
        """Has the tenant's admin authority over objects (every run, every approval): an
        owner's or admin's session, or a key made by one that is not limited to agents.
        Actions still need their scope."""
        return self.has_role(Role.ADMIN) and self.limited_to_agents() is None

    @property
    def is_owner(self) -> bool:
        return self.has_role(Role.OWNER) and self.has_scope(Scope.ADMIN)

    @property
    def acts_for_members(self) -> bool:
        """A key that may name a member whose run it starts: set so when it was made, and
        its role still an owner's or admin's (a key of a creator demoted since may not)."""
        return (
            self.api_key is not None and self.api_key.acts_for_members and self.has_role(Role.ADMIN)
        )

    def limited_to_agents(self) -> frozenset[str] | None:
        """Slugs of the agents and crews a limited key may run; None: no such limit."""
        if self.api_key is None or not self.api_key.allowed_agents:
            return None
        return frozenset(self.api_key.allowed_agents)

    def limited_to_tools(self) -> frozenset[str] | None:
        if self.api_key is None or not self.api_key.allowed_tools:
            return None
        return frozenset(self.api_key.allowed_tools)

    def may_execute_tool(self, name: str) -> bool:
        limit = self.limited_to_tools()
        return self.may(Action.EXECUTE_TOOL) and (limit is None or name in limit)

    def is_initiator_of(self, user_id: int | None, api_key_id: int | None) -> bool:
        if self.api_key is not None:
            return api_key_id == self.api_key.pk
        return self.user is not None and user_id == self.user.pk


def declares(action: Action, methods: tuple[str, ...] = ("GET",)):
    """Mark a view answering `methods` (one that checks `action` itself, e.g. `/v1`) with
    its policy action, for the route-by-role test, which fails on a route declaring none."""

    def mark(view):
        view.policy_action = action
        view.policy_methods = methods
        return view

    return mark
