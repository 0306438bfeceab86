"""A person's data in one tenant: their own export, and an admin's erasure of them
(docs/operations.md, "Offboarding: a person").

What is theirs: the conversations they own (with messages and attached files), what agents
remember about them (person-scope facts, `agents.memory`), the runs they started (with
events), the files they uploaded. Erasure deletes the conversations, facts and files and
anonymises the runs: a run keeps its row with its usage and cost (usage reports, quotas and
the audit log count them) and loses its content (input, output, error, checkpoint, the
caller's request, its events) and who started it. The membership goes too (its keys
revoked, `tenancy.services.membership_remove`), then one audit entry says what was erased.

Each step deletes what is still there, in batches each committed, so an erasure interrupted
is finished by asking again (the person stays findable while anything of theirs is left:
`person_in_tenant`).
"""

from __future__ import annotations

import json
import zipfile
from typing import IO, Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from agents import memory
from agents.models import Attachment, Conversation, Feedback, Message, Run, RunEvent
from lifecycle.export import SECRET, ArchiveEncoder, attachment_copy, batches, row_data
from lifecycle.tables import secret_fields
from tenancy import services as tenancy_services
from tenancy.models import AuditAction, Membership, Tenant
from tenancy.policy import Principal
from tenancy.records import audit

FORMAT = "agent-platform-person-export/1"
BATCH = 200
# A run's content: cleared when its starter is erased (its usage and cost stay).
RUN_CONTENT = {
    "input": "",
    "output": "",
    "error": "",
    "structured_output": None,
    "client_request": None,
    "state": None,
    "claim": None,
    "initiated_by_user": None,
}


def person_in_tenant(*, tenant: Tenant, user_id: Any) -> AbstractBaseUser:
    """The person `user_id` names, if a member of `tenant` or holding anything in it (an
    erasure half done); else 404, as for another tenant's person."""
    try:
        pk = int(user_id)
    except (TypeError, ValueError):
        raise Http404("No such person.") from None
    user = get_user_model().objects.filter(pk=pk).first()
    if user is None or not (
        Membership.objects.filter(tenant=tenant, user=user).exists()
        or Conversation.objects.filter(tenant=tenant, owner_user=user).exists()
        or memory.facts_about(tenant=tenant, user=user).exists()
        or Run.objects.filter(tenant=tenant, initiated_by_user=user).exists()
    ):
        raise Http404("No such person.")
    return user


# -- export -----------------------------------------------------------------------------------
def person_export(*, tenant: Tenant, user: AbstractBaseUser, output: IO[bytes]) -> dict[str, int]:
    """Write `user`'s own data in `tenant` as a zip to `output`: `conversations.jsonl` (each
    with its messages), `facts.jsonl`, `runs.jsonl`, `run_events.jsonl`, their attached files
    under `files/`, and `manifest.json`. In batches: memory bounded by one batch."""
    counts: dict[str, int] = {}
    conversations = Conversation.objects.filter(tenant=tenant, owner_user=user)
    runs = Run.objects.filter(tenant=tenant, initiated_by_user=user)
    kinds = {
        "facts": memory.facts_about(tenant=tenant, user=user),
        "runs": runs,
        "run_events": RunEvent.objects.filter(tenant=tenant, run__in=runs),
        "attachments": Attachment.objects.filter(tenant=tenant, uploaded_by_user=user),
    }
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        with archive.open("conversations.jsonl", "w", force_zip64=True) as out:
            counts["conversations"] = 0
            for rows in batches(conversations, BATCH):
                for conversation in rows:
                    data = row_data(conversation, set())
                    data["messages"] = [
                        row_data(m, set())
                        for m in Message.objects.filter(conversation=conversation).order_by("pk")
                    ]
                    out.write(json.dumps(data, cls=ArchiveEncoder).encode() + b"\n")
                counts["conversations"] += len(rows)
        for kind, queryset in kinds.items():
            secrets = secret_fields(queryset.model)
            counts[kind] = 0
            with archive.open(f"{kind}.jsonl", "w", force_zip64=True) as out:
                for rows in batches(queryset.select_related(None), BATCH):
                    for obj in rows:
                        line = json.dumps(row_data(obj, secrets), cls=ArchiveEncoder)
                        out.write(line.encode() + b"\n")
                    counts[kind] += len(rows)
        counts["files"] = attachment_copys(archive, kinds["attachments"])
        manifest = {
            "format": FORMAT,
            "tenant": tenant.slug,
            "person": {"id": user.pk, "username": user.get_username()},
            "exported_at": timezone.now().isoformat(),
            "counts": counts,
            "secrets": f"never exported: secret columns read {SECRET!r} when set",
        }
        archive.writestr("manifest.json", json.dumps(manifest, indent=2))
    return counts


def attachment_copys(archive: zipfile.ZipFile, attachments) -> int:

    copied = 0
    for rows in batches(attachments, BATCH):
        copied += sum(attachment_copy(archive, attachment) for attachment in rows)
    return copied


# -- erasure ----------------------------------------------------------------------------------
def person_erase(
    *, tenant: Tenant, user: AbstractBaseUser, by: Principal, batch: int = BATCH
) -> dict[str, int]:
    """Erase `user` from `tenant` with `by`'s authority (an admin; only an owner erases an
    owner; the last owner stays: ValidationError/PermissionDenied before anything goes).
    Returns what was erased, which the audit entry also records."""
    membership = Membership.objects.filter(tenant=tenant, user=user).first()
    if membership is not None:
        tenancy_services.require_owner_for(by, membership.role)
    erased = {"conversations": 0, "facts": 0, "attachments": 0, "runs_anonymised": 0}
    facts = memory.facts_about(tenant=tenant, user=user)
    with transaction.atomic():
        if membership is not None:
            erased["facts"] = facts.count()  # leaving forgets them (agents.memory)
            tenancy_services.membership_remove(membership=membership, by=by)
    while chunk := list(facts[:batch]):  # (a former member's, left behind before that rule)
        memory.facts_forget(facts=chunk, actor=by.user or by.api_key)
        erased["facts"] += len(chunk)
    uploads = Attachment.objects.filter(tenant=tenant, uploaded_by_user=user).order_by("pk")
    while pks := list(uploads.values_list("pk", flat=True)[:batch]):
        erased["attachments"] += (
            Attachment.objects.filter(pk__in=pks).delete()[1].get("agents.Attachment", 0)
        )  # each file goes once its row's deletion commits (agents.conversations)
    owned = Conversation.objects.filter(tenant=tenant, owner_user=user).order_by("pk")
    while pks := list(owned.values_list("pk", flat=True)[:batch]):
        with transaction.atomic():
            deleted = Conversation.objects.filter(pk__in=pks).delete()[1]
        erased["conversations"] += deleted.get("agents.Conversation", 0)
        erased["attachments"] += deleted.get("agents.Attachment", 0)
    Feedback.objects.filter(tenant=tenant, user=user).delete()
    started = Run.objects.filter(tenant=tenant, initiated_by_user=user).order_by("pk")
    while pks := list(started.values_list("pk", flat=True)[:batch]):
        with transaction.atomic():
            RunEvent.objects.filter(tenant=tenant, run_id__in=pks).delete()
            erased["runs_anonymised"] += Run.objects.filter(pk__in=pks).update(**RUN_CONTENT)
    audit.record(
        tenant=tenant,
        action=AuditAction.MEMBER_REMOVED,
        actor=by.user or by.api_key,
        details={"erased_person": user.pk, "erased": erased},
    )
    return erased
