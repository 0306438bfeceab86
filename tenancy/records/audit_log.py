"""Reading a tenant's audit log: the filters the web page and the REST endpoint share.

One form validates them for both faces (the page shows its errors with a 400, the API
answers its `{"error": ...}` 400): an unknown action, a date that is not one, a NUL
character or an overlong value is refused, never passed to the database.
"""

from __future__ import annotations

import json
from datetime import datetime, time, timedelta
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.utils import timezone

from tenancy.models import AuditAction, AuditEntry, Tenant


def audit_entries(tenant: Tenant) -> QuerySet[AuditEntry]:
    """The tenant's entries, newest first. Never another tenant's."""
    return AuditEntry.objects.filter(tenant=tenant).order_by("-at", "-id")


class AuditFilterForm(forms.Form):
    action = forms.ChoiceField(required=False, choices=[("", "All"), *AuditAction.choices])
    actor = forms.CharField(required=False, max_length=200, help_text="Part of the name.")
    object_type = forms.CharField(
        required=False, max_length=100, label="Object type", help_text="e.g. agents.agent"
    )
    since = forms.DateField(
        required=False, label="From", widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        required=False, label="To", widget=forms.DateInput(attrs={"type": "date"})
    )

    def clean(self) -> dict:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        for name, day in (("since", since), ("until", until)):
            if day is not None and not 1900 <= day.year <= 9000:
                self.add_error(name, "Give a date between the years 1900 and 9000.")
                return data
        if since and until and since > until:
            raise forms.ValidationError("“From” must not be after “To”.")
        return data

    def apply(self, entries: QuerySet[AuditEntry]) -> QuerySet[AuditEntry]:
        """`entries` filtered by the form, which must be valid."""
        data = self.cleaned_data
        if data.get("action"):
            entries = entries.filter(action=data["action"])
        if data.get("actor"):
            entries = entries.filter(actor_label__icontains=data["actor"].strip())
        if data.get("object_type"):
            entries = entries.filter(object_type=data["object_type"].strip().lower())
        zone = timezone.get_current_timezone()
        if data.get("since"):
            entries = entries.filter(at__gte=datetime.combine(data["since"], time(), zone))
        if data.get("until"):
            end = datetime.combine(data["until"] + timedelta(days=1), time(), zone)
            entries = entries.filter(at__lt=end)
        return entries


def shown(value: Any) -> str:
    """A before/after value as text for the page: empty for none, JSON for the rest."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def diff_rows(entry: AuditEntry) -> list[tuple[str, str, str]]:
    """(field, before, after) of an entry's changes, in field order as recorded."""
    rows = []
    for name, pair in (entry.changes or {}).items():
        before, after = pair if isinstance(pair, list) and len(pair) == 2 else (None, pair)
        rows.append((name.replace("_", " "), shown(before), shown(after)))
    return rows
