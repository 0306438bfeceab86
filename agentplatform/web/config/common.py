"""What the configuration pages share: the admin-only access check, rendering a page or
one of its partials (htmx), and putting a service's ValidationError next to the fields."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers

from agentplatform.saving import SaveConflict
from agentplatform.tenancy.models import Role
from agentplatform.tenancy.resolution import tenant_member_required

# Owners and admins only: non-members 404, members and viewers 403.
admin_required = tenant_member_required(Role.ADMIN)


def render_page(
    request: HttpRequest,
    template: str,
    context: Mapping[str, Any],
    *,
    partial: str | None = None,
    status: int = 200,
) -> HttpResponse:
    """The whole page, or only `partial` of it when htmx asks (one URL, two answers)."""
    name = f"{template}#{partial}" if partial and request.htmx else template
    response = render(request, name, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


def add_service_errors(form: forms.BaseForm, error: ValidationError | SaveConflict) -> None:
    """A service's refusal shown in place: field errors beside their field, the rest on top."""
    if isinstance(error, SaveConflict):
        form.add_error(None, str(error))
        return
    if not hasattr(error, "error_dict"):
        form.add_error(None, error)
        return
    for field, messages in error.message_dict.items():
        target = field if field in form.fields else None
        if target is None and field != "__all__":
            messages = [f"{field.replace('_', ' ')}: {m}" for m in messages]
        form.add_error(target, messages)


def error_messages(error: ValidationError) -> list[str]:
    """Plain messages of a ValidationError, for pages without a form field to attach to."""
    return list(error.messages)


class SecretField(forms.CharField):
    """A write-only credential: never rendered back (not even masked); blank keeps the
    stored value. A `clear_<name>` checkbox beside it removes the stored value."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("strip", True)
        kwargs["widget"] = forms.PasswordInput(
            render_value=False, attrs={"autocomplete": "new-password"}
        )
        super().__init__(**kwargs)


def secret_changes(form: forms.BaseForm, name: str) -> dict[str, Any]:
    """The change a SecretField asks for: a new value, a removal, or nothing."""
    value = form.cleaned_data.get(name)
    if value:
        return {name: value}
    if form.cleaned_data.get(f"clear_{name}"):
        return {name: None}
    return {}


class JsonTextarea(forms.Textarea):
    """A monospace textarea for JSON; config.js adds a "Format JSON" button beside it."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        base = {"rows": 8, "class": "code", "spellcheck": "false", "data-json": ""}
        super().__init__({**base, **(attrs or {})})


class PrettyJSONField(forms.JSONField):
    """JSON shown indented, so a schema reads like one in the textarea."""

    def prepare_value(self, value: Any) -> str:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        if value is None:
            return ""
        return json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)


class PlainLabels:
    """Form mixin: labels without Django's trailing colon."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
