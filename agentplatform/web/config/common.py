"""What the configuration pages share: the admin-only access check, rendering a page or
one of its partials (htmx), and putting a service's ValidationError next to the fields."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers

from tenancy.policy import Action
from tenancy.records.saving import SaveConflict
from tenancy.resolution import tenant_member_required
from tenancy.selectors import value_taken

# Changing the configuration (owners and admins): non-members 404, members and viewers 403.
admin_required = tenant_member_required(Action.CHANGE_CONFIG)
members_admin_required = tenant_member_required(Action.MANAGE_MEMBERS)
keys_admin_required = tenant_member_required(Action.MANAGE_KEYS)


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
    for field, texts in error.message_dict.items():
        target = field if field in form.fields else None
        if target is None and field != "__all__":
            texts = [f"{field.replace('_', ' ')}: {m}" for m in texts]
        form.add_error(target, texts)


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


class StoredSecretForm:
    """A ModelForm whose `write_only_field` is a write-only SecretField (with an optional
    `clear_<field>` box): the model's validation sees the secret this save would store (it
    checks where a secret may go), and `changes()` is what the save service takes."""

    write_only_field: str

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        change = secret_changes(self, self.write_only_field)
        if self.write_only_field in change:
            setattr(self.instance, self.write_only_field, change[self.write_only_field])
        return cleaned

    def changes(self) -> dict[str, Any]:
        data = {name: self.cleaned_data[name] for name in self.Meta.fields}
        return {**data, **secret_changes(self, self.write_only_field)}


class JsonTextarea(forms.Textarea):
    """A monospace textarea for JSON; config.js adds a "Format JSON" button beside it."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        base = {"rows": 8, "class": "code", "spellcheck": "false", "data-json": ""}
        super().__init__({**base, **(attrs or {})})


class PrettyJSONField(forms.JSONField):
    """JSON shown indented, so a schema reads like one in the textarea. JSON nested too
    deeply for Python's parser is refused as invalid (not a RecursionError, a 500)."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except RecursionError:
            raise ValidationError("Nested too deeply.", code="invalid") from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return forms.fields.InvalidJSONInput(data)

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


def try_save(request: HttpRequest, form: forms.BaseForm, save: Callable[[], Any], what: str):
    """A valid POSTed form through its service: the saved object (with a "Saved" message),
    or None — not posted, invalid, or refused by the service (its errors then on the form)."""
    if request.method != "POST" or not form.is_valid():
        return None
    try:
        saved = save()
    except (ValidationError, SaveConflict) as error:
        add_service_errors(form, error)
        return None
    messages.success(request, f"Saved {what} “{saved.name}”.")
    return saved


def refusal_shown(save: Callable[[], Any]) -> Callable[[], Any]:
    """`save` (for `try_save`), with the service's PermissionDenied shown on the form as
    its errors are (e.g. weakening a publish gate without the right to override)."""

    def call() -> Any:
        try:
            return save()
        except PermissionDenied as refused:
            raise ValidationError(str(refused)) from None

    return call


def render_form(request: HttpRequest, template: str, context: Mapping[str, Any]) -> HttpResponse:
    """A form page: 400 while its form shows errors."""
    return render_page(request, template, context, status=400 if context["form"].errors else 200)


def confirm_delete(
    request: HttpRequest,
    obj: Any,
    *,
    delete: Callable[[], None],
    what: str,
    cancel: str,
    noun: str | None = None,
) -> HttpResponse:
    """GET: the confirmation page; POST: delete through the service, then back to `cancel`."""
    if request.method == "POST":
        try:
            delete()
        except ValidationError as refused:  # e.g. other tools take inputs from this one
            messages.error(request, " ".join(refused.messages))
            return redirect(cancel, tenant_slug=request.tenant.slug)
        messages.success(request, f"Deleted {noun or what} “{obj.name}”.")
        return redirect(cancel, tenant_slug=request.tenant.slug)
    context = {"object": obj, "what": what, "cancel": cancel}
    return render_page(request, "web/config/confirm_delete.html", context)


def unique_in_tenant(form: forms.ModelForm, field: str, noun: str) -> Any:
    """`clean_<field>`: no other object of the workspace has this value."""
    value = form.cleaned_data[field]
    instance = form.instance
    if value_taken(
        model=form._meta.model, tenant=instance.tenant, field=field, value=value, but=instance.pk
    ):
        raise ValidationError(f"Another {noun} of this workspace has this {field}.")
    return value
