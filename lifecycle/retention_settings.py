"""What an admin may set of retention (the settings page, REST, the configuration document):
a tenant's days per kind and its legal holds. Every change is audited; a bad value is refused
with a ValidationError naming its field, and leaves the stored settings as they were."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404

from agents.selectors import conversation_get
from lifecycle.models import LegalHold, RetentionPolicy
from lifecycle.retention import KINDS, platform_default, retention_in_effect
from tenancy.models import AuditAction, Tenant
from tenancy.records import audit

MAX_DAYS = 36500  # a hundred years: beyond that, say forever (0)
REASON_CHARS = 300


def days_checked(name: str, value: Any) -> int | None:
    """A day count as given (JSON or a form): None/"" follows the default, 0 keeps forever,
    1..MAX_DAYS days. Anything else: a ValidationError naming `name`."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DAYS:
        raise ValidationError(
            {name: f"Give a whole number of days from 0 (forever) to {MAX_DAYS}, or leave it "
             "empty for the platform's default."}
        )  # fmt: skip
    return value


# -- reads -----------------------------------------------------------------------------------
def retention_policy_of(*, tenant: Tenant) -> RetentionPolicy:
    """The tenant's stored settings, or unsaved empty ones (the platform's default). One query."""
    return RetentionPolicy.objects.filter(tenant=tenant).first() or RetentionPolicy(tenant=tenant)


def retention_shown(*, tenant: Tenant) -> dict[str, Any]:
    """The settings as REST and the page show them: as set, in effect, the platform's default,
    and the conversations on hold. Two queries."""
    policy = retention_policy_of(tenant=tenant)
    effect, default = retention_in_effect(policy), platform_default()
    return {
        **{kind: getattr(policy, kind) for kind in KINDS},
        "legal_hold": policy.legal_hold,
        "legal_hold_reason": policy.legal_hold_reason,
        "in_effect": {kind: getattr(effect, kind) for kind in KINDS},
        "platform_default": {kind: getattr(default, kind) for kind in KINDS},
        "held_conversations": [
            {"conversation": h.conversation_id, "reason": h.reason, "placed_at": h.placed_at}
            for h in legal_holds_of(tenant=tenant)
        ],
    }


def legal_holds_of(*, tenant: Tenant) -> list[LegalHold]:
    return list(LegalHold.objects.filter(tenant=tenant).order_by("pk"))


def retention_document_entry(*, tenant: Tenant) -> dict[str, int | None]:
    """The configuration document's `retention` section: the days as set (no holds: a legal
    hold is no configuration, and no document import may lift one)."""
    policy = retention_policy_of(tenant=tenant)
    return {kind: getattr(policy, kind) for kind in KINDS}


# -- writes ------------------------------------------------------------------------------------
def retention_set(
    *,
    tenant: Tenant,
    changes: dict[str, Any],
    actor: Any = None,
) -> RetentionPolicy:
    """Set some of the tenant's days (`KINDS`), `legal_hold` and `legal_hold_reason`; fields not
    in `changes` keep their value. Audited: the days as `config.changed`, a hold placed or
    lifted as its own entry. Unknown fields and bad values: a ValidationError, nothing saved."""
    unknown = sorted(set(changes) - {*KINDS, "legal_hold", "legal_hold_reason"})
    if unknown:
        raise ValidationError({name: "Not a retention setting." for name in unknown})
    values: dict[str, Any] = {}
    for kind in KINDS:
        if kind in changes:
            values[kind] = days_checked(kind, changes[kind])
    if "legal_hold" in changes:
        if not isinstance(changes["legal_hold"], bool):
            raise ValidationError({"legal_hold": "Give true or false."})
        values["legal_hold"] = changes["legal_hold"]
    if "legal_hold_reason" in changes:
        reason = changes["legal_hold_reason"]
        if not isinstance(reason, str) or len(reason) > REASON_CHARS:
            raise ValidationError({"legal_hold_reason": f"Give text of {REASON_CHARS} "
                                   "characters at most."})  # fmt: skip
        values["legal_hold_reason"] = reason.replace("\x00", "")
    with transaction.atomic():
        policy, _ = RetentionPolicy.objects.select_for_update().get_or_create(tenant=tenant)
        before = {name: getattr(policy, name) for name in values}
        for name, value in values.items():
            setattr(policy, name, value)
        policy.save()
        changed = {n: [before[n], v] for n, v in values.items() if before[n] != v}
        days = {n: change for n, change in changed.items() if n in KINDS}
        if days:
            audit.record(tenant=tenant, action=AuditAction.CONFIG_CHANGED, actor=actor,
                         obj=policy, changes=days)  # fmt: skip
        if "legal_hold" in changed:
            audit.record(
                tenant=tenant,
                action=AuditAction.LEGAL_HOLD_PLACED
                if policy.legal_hold
                else AuditAction.LEGAL_HOLD_LIFTED,
                actor=actor,
                obj=policy,
                details={"scope": "tenant", "reason": policy.legal_hold_reason},
            )
    return policy


def conversation_hold_place(
    *, tenant: Tenant, conversation_id: Any, reason: str = "", by: Any = None
) -> LegalHold:
    """Hold one of the tenant's conversations (another tenant's: 404). Placing it again keeps
    the first hold. Audited. `by`: the user or API key acting (None: the request's)."""
    if not isinstance(reason, str) or len(reason) > REASON_CHARS:
        raise ValidationError({"reason": f"Give text of {REASON_CHARS} characters at most."})
    conversation = conversation_get(tenant=tenant, conversation_id=conversation_id)
    with transaction.atomic():
        hold, created = LegalHold.objects.get_or_create(
            tenant=tenant,
            conversation=conversation,
            defaults={"reason": reason.replace("\x00", ""), "placed_by": _user_or_none(by)},
        )
        if created:
            details = {"scope": "conversation", "reason": hold.reason}
            audit.record(
                tenant=tenant, action=AuditAction.LEGAL_HOLD_PLACED, actor=by, obj=hold,
                details=details,
            )  # fmt: skip
    return hold


def _user_or_none(by: Any):
    return by if isinstance(by, get_user_model()) else None


def conversation_hold_lift(*, tenant: Tenant, conversation_id: Any, actor: Any = None) -> None:
    """Lift the hold on one of the tenant's conversations (none, or another tenant's: 404)."""
    conversation = conversation_get(tenant=tenant, conversation_id=conversation_id)
    with transaction.atomic():
        hold = LegalHold.objects.filter(tenant=tenant, conversation=conversation).first()
        if hold is None:
            raise Http404("That conversation is not on hold.")
        audit.record(tenant=tenant, action=AuditAction.LEGAL_HOLD_LIFTED, actor=actor, obj=hold,
                     details={"scope": "conversation"})  # fmt: skip
        hold.delete()
