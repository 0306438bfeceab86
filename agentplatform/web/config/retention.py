"""The retention page (docs/operations.md, "Retention"): how long the tenant's runs' events,
conversations, attachments and audit entries are kept, the tenant's legal hold and the
conversations on hold. Owners and admins only (`manage_retention`); every write goes through
lifecycle.retention_settings, as REST does."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from agentplatform.web.config.common import PlainLabels, add_service_errors, render_page
from lifecycle.retention import KINDS
from lifecycle.retention_settings import (
    MAX_DAYS,
    REASON_CHARS,
    conversation_hold_lift,
    conversation_hold_place,
    retention_set,
    retention_shown,
)
from tenancy.policy import Action
from tenancy.resolution import tenant_member_required

PAGE = "web/config/retention.html"
retention_admin_required = tenant_member_required(Action.MANAGE_RETENTION)
LABELS = {
    "run_days": "Runs' events (days)",
    "conversation_days": "Conversations (days)",
    "attachment_days": "Attachments (days)",
    "audit_days": "Audit entries (days)",
}


def _days(label: str) -> forms.IntegerField:
    return forms.IntegerField(
        label=label, required=False, min_value=0, max_value=MAX_DAYS,
        help_text="Empty: the platform's default. 0: forever.",
    )  # fmt: skip


class RetentionForm(PlainLabels, forms.Form):
    run_days = _days(LABELS["run_days"])
    conversation_days = _days(LABELS["conversation_days"])
    attachment_days = _days(LABELS["attachment_days"])
    audit_days = _days(LABELS["audit_days"])
    legal_hold = forms.BooleanField(
        required=False, label="Legal hold on the whole tenant",
        help_text="While on, nothing of the tenant is purged.",
    )  # fmt: skip
    legal_hold_reason = forms.CharField(
        required=False, max_length=REASON_CHARS, label="Reason for the hold"
    )


class HoldForm(PlainLabels, forms.Form):
    conversation = forms.IntegerField(
        min_value=1, label="Conversation number", help_text="As in its address: /chat/<number>/."
    )
    reason = forms.CharField(required=False, max_length=REASON_CHARS)


def _page(
    request: HttpRequest, form: RetentionForm | None = None, hold_form: HoldForm | None = None
) -> HttpResponse:
    shown = retention_shown(tenant=request.tenant)
    form = form or RetentionForm(
        initial={name: shown[name] for name in (*KINDS, "legal_hold", "legal_hold_reason")}
    )
    rows = [
        {"label": LABELS[kind], "set": shown[kind], "in_effect": shown["in_effect"][kind],
         "default": shown["platform_default"][kind]}
        for kind in KINDS
    ]  # fmt: skip
    context: dict[str, Any] = {
        "form": form, "hold_form": hold_form or HoldForm(), "rows": rows, "shown": shown,
    }  # fmt: skip
    failed = form.errors or (hold_form is not None and hold_form.errors)
    return render_page(request, PAGE, context, status=400 if failed else 200)


def _back(request: HttpRequest) -> HttpResponse:
    return redirect("config:retention", tenant_slug=request.tenant.slug)


@retention_admin_required
def retention_page(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request)
    form = RetentionForm(request.POST)
    if form.is_valid():
        try:
            retention_set(tenant=request.tenant, changes=dict(form.cleaned_data))
        except ValidationError as error:
            add_service_errors(form, error)
        else:
            messages.success(request, "Retention saved.")
            return _back(request)
    return _page(request, form=form)


@retention_admin_required
def hold_place(request: HttpRequest) -> HttpResponse:
    """POST: hold a conversation (a GET shows the page)."""
    if request.method != "POST":
        return _back(request)
    form = HoldForm(request.POST)
    if form.is_valid():
        try:
            conversation_hold_place(
                tenant=request.tenant, conversation_id=form.cleaned_data["conversation"],
                reason=form.cleaned_data["reason"], by=request.user,
            )  # fmt: skip
        except ValidationError as error:
            add_service_errors(form, error)
        else:
            messages.success(request, "Conversation held.")
            return _back(request)
    return _page(request, hold_form=form)


@retention_admin_required
def hold_lift(request: HttpRequest, conversation: int) -> HttpResponse:
    """POST: lift a conversation's hold (none, or another tenant's: 404)."""
    if request.method != "POST":
        return _back(request)
    conversation_hold_lift(tenant=request.tenant, conversation_id=conversation)
    messages.success(request, "Hold lifted.")
    return _back(request)
