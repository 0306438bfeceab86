"""What people do to remembered facts: edit one's text (embedded again, so recall finds it
by its new meaning) and delete one, each audited with who acted. Which facts a principal
may touch is `selectors.fact_visible`'s rule; writing needs `write_data` (the callers ask
the policy)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from agents.memory.audit import record_fact
from agents.memory.recall import embedded
from agents.models import Fact, FactScope
from agents.runtime.memory import MAX_FACT_CHARS
from tenancy import rls
from tenancy.models import AuditAction
from tenancy.policy import Principal
from tenancy.records import audit


def fact_text_checked(text: object) -> str:
    """The text a person gives a fact: trimmed, 1 to MAX_FACT_CHARS characters, no NUL."""
    if not isinstance(text, str):
        raise ValidationError({"text": "Give the fact as text."})
    text = text.strip()
    if not text:
        raise ValidationError({"text": "A fact cannot be empty: delete it instead."})
    if len(text) > MAX_FACT_CHARS:
        raise ValidationError({"text": f"At most {MAX_FACT_CHARS} characters."})
    if "\x00" in text:
        raise ValidationError({"text": "The text holds a NUL character."})
    return text


def fact_edit(*, principal: Principal, fact: Fact, text: object) -> Fact:
    """Give `fact` (found through `fact_visible(principal)`) new text: embedded first
    (outside the transaction: one model call), then saved with its editor and one audit
    entry. An unchanged text changes nothing."""
    if fact.tenant_id != principal.tenant.pk:
        raise Http404("No such fact.")
    text = fact_text_checked(text)
    if text == fact.text:
        return fact
    found = async_to_sync(embedded)([text])
    changes = {
        "text": text,
        "embedding": found[1][0] if found else None,
        "embedder": found[0] if found else "",
        "edited_by": principal.user,
        "edited_at": timezone.now(),
    }
    with transaction.atomic():
        # One UPDATE, the vector with it (Fact.save would drop it as the old text's).
        if not Fact.objects.filter(pk=fact.pk).update(**changes):
            raise Http404("No such fact.")  # deleted meanwhile
        for name, value in changes.items():
            setattr(fact, name, value)
        record_fact(fact, AuditAction.FACT_EDITED, actor=principal.initiator, changed=["text"])
    return fact


def fact_delete(*, principal: Principal, fact: Fact) -> None:
    """Forget `fact` (found through `fact_visible(principal)`), audited."""
    if fact.tenant_id != principal.tenant.pk:
        raise Http404("No such fact.")
    facts_forget(facts=[fact], actor=principal.initiator)


def member_facts_forget(*, tenant_id: int, user_id: int) -> int:
    """A member left the tenant: what its agents remembered about them (person scope) goes
    with them — no run reads it any more, and a later invitation starts afresh. Each fact
    audited (the system acting). Returns how many."""
    with rls.tenant_scope(tenant_id), transaction.atomic():
        facts = list(
            Fact.objects.filter(tenant_id=tenant_id, scope=FactScope.PERSON, user_id=user_id)
        )
        for fact in facts:
            record_fact(fact, AuditAction.FACT_FORGOTTEN, actor=audit.SYSTEM, reason="member left")
        Fact.objects.filter(pk__in=[fact.pk for fact in facts]).delete()
    return len(facts)


def facts_forget(*, facts: list[Fact], actor: Any) -> None:
    """Forget `facts` (the caller found them through its own rule: the admin's tenants),
    each with its audit entry, in one transaction."""
    with transaction.atomic():
        for fact in facts:
            record_fact(fact, AuditAction.FACT_FORGOTTEN, actor=actor)
        Fact.objects.filter(pk__in=[fact.pk for fact in facts]).delete()
