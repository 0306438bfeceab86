"""A tool from a pasted cURL command, as a page (issue #40; docs/tool-import-curl.md): the
command's values are listed, the admin ticks those that become the model's arguments,
sees the draft, then saves it or opens it in the tool form.

The command may carry a credential, so once read it is never rendered back into the page:
it waits in the session (one command, at most MAX_COMMAND_CHARS, encrypted with the
platform's field keys: sessions are rows too) for the save, which takes the credential as
the tool's secret, and leaves it there. Every step reads the command
again (`tools.imports.curl_import`); the places the admin marks are its indexes."""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from agentplatform.web.config.common import (
    PlainLabels,
    SecretField,
    admin_required,
    error_messages,
    render_page,
)
from agentplatform.web.config.tool_imports import arguments_table
from agentplatform.web.config.tools import PREFILL
from base.encryption import decrypt, encrypt
from tools.imports import ImportRefused, curl_import
from tools.services import tool_definition_save

MAX_COMMAND_CHARS = 20_000  # the parser's bound (tools/runtime/imports/curl.py)
TYPES = ("string", "integer", "number", "boolean", "array", "object")
COMMAND = "tool_import_curl_command"  # the session's key: the command, credential included
TEMPLATE = "web/config/tool_import_curl.html"


class CommandForm(PlainLabels, forms.Form):
    command = forms.CharField(
        max_length=MAX_COMMAND_CHARS,
        strip=False,
        widget=forms.Textarea({"rows": 6, "class": "code", "spellcheck": "false"}),
        label="cURL command",
        help_text="One command, as API documentation gives it. It is read, never run; "
        "its credential becomes the tool's secret and is never shown again.",
    )


class DraftForm(PlainLabels, forms.Form):
    """The tool's name and description, the secret, and per place (index i) whether it is
    an argument: mark_i, name_i, type_i, description_i."""

    name = forms.CharField(required=False, max_length=64, label="Tool name")
    description = forms.CharField(
        required=False, max_length=4000, widget=forms.Textarea({"rows": 2}), label="Description"
    )
    secret = SecretField(
        label="Secret", help_text="Blank: the credential found in the command, if any."
    )

    def __init__(self, *args: Any, places: tuple[tuple[str, Any], ...] = (), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.places = places
        for i, (place, _value) in enumerate(places):
            self.fields[f"mark_{i}"] = forms.BooleanField(required=False, label="Argument")
            self.fields[f"name_{i}"] = forms.CharField(
                required=False, max_length=64, initial=_suggested_name(place), label="Name"
            )
            self.fields[f"type_{i}"] = forms.ChoiceField(
                required=False, choices=[("", "as the value")] + [(t, t) for t in TYPES],
                label="Type",
            )  # fmt: skip
            self.fields[f"description_{i}"] = forms.CharField(
                required=False, max_length=1000, label="Description"
            )

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "place": place,
                "value": value,
                "mark": self[f"mark_{i}"],
                "name": self[f"name_{i}"],
                "type": self[f"type_{i}"],
                "description": self[f"description_{i}"],
            }
            for i, (place, value) in enumerate(self.places)
        ]

    def marks(self) -> dict[str, dict[str, Any]]:
        data = self.cleaned_data
        marks = {}
        for i, (place, _) in enumerate(self.places):
            if data.get(f"mark_{i}"):
                mark = {"name": data.get(f"name_{i}") or _suggested_name(place)}
                if data.get(f"type_{i}"):
                    mark["type"] = data[f"type_{i}"]
                if data.get(f"description_{i}"):
                    mark["description"] = data[f"description_{i}"]
                marks[place] = mark
        return marks


@admin_required
def tool_import_curl(request: HttpRequest) -> HttpResponse:
    """GET: paste a command. POST `step`: read (the command), preview (the marks applied),
    save (the tool, with the command's credential), form (the tool form, prefilled)."""
    step = request.POST.get("step") if request.method == "POST" else None
    if step in ("preview", "save", "form"):
        return _draft_step(request, step)
    form = CommandForm(request.POST if step == "read" else None)
    if step != "read" or not form.is_valid():
        return _page(request, form=form, status=400 if form.errors else 200)
    command = form.cleaned_data["command"]
    try:
        found = curl_import(command=command)
    except ImportRefused as refused:
        return _page(request, form=CommandForm(), refused=refused.message, status=400)
    request.session[COMMAND] = encrypt(command)
    draft_form = DraftForm(initial={"name": found.draft.name}, places=found.places)
    return _page(request, draft_form=draft_form, found=found)


def _draft_step(request: HttpRequest, step: str) -> HttpResponse:
    command = _kept_command(request)
    if command is None:
        gone = "The command is no longer here (another one was read since): paste it again."
        return _page(request, form=CommandForm(), refused=gone, status=400)
    try:
        places = curl_import(command=command).places
    except ImportRefused as refused:  # (it was read before; not if the parser changed since)
        request.session.pop(COMMAND, None)
        return _page(request, form=CommandForm(), refused=refused.message, status=400)
    draft_form = DraftForm(request.POST, places=places)
    if not draft_form.is_valid():
        return _page(request, draft_form=draft_form, status=400)
    data = draft_form.cleaned_data
    try:
        found = curl_import(
            command=command,
            marks=draft_form.marks(),
            name=data["name"] or None,
            description=data["description"] or None,
        )
    except ImportRefused as refused:
        return _page(request, draft_form=draft_form, refused=refused.message, status=400)
    fields = found.draft.definition_fields()
    if step == "form":
        request.session[PREFILL] = fields
        request.session.pop(COMMAND, None)
        if found.secret:
            messages.info(
                request, "The command's credential is not carried over: give it as the secret."
            )
        return redirect("config:tool_create", tenant_slug=request.tenant.slug)
    if step == "save":
        secret = data.get("secret") or found.secret
        try:
            saved = tool_definition_save(
                tenant=request.tenant, definition=None,
                changes={**fields, **({"secret": secret} if secret else {})},
            )  # fmt: skip
        except ValidationError as refused:
            message = "; ".join(error_messages(refused))
            return _page(request, draft_form=draft_form, found=found, refused=message, status=400)
        request.session.pop(COMMAND, None)
        messages.success(request, f"Saved tool “{saved.name}”.")
        return redirect("config:tool_edit", tenant_slug=request.tenant.slug, pk=saved.pk)
    return _page(request, draft_form=draft_form, found=found)


def _page(
    request: HttpRequest,
    *,
    form: CommandForm | None = None,
    draft_form: DraftForm | None = None,
    found: Any = None,
    refused: str = "",
    status: int = 200,
) -> HttpResponse:
    draft = found.draft if found is not None else None
    context = {
        "form": form,
        "draft_form": draft_form,
        "found": found,
        "draft": draft,
        "arguments": arguments_table(draft.input_schema) if draft else [],
        "config_json": _pretty(draft.config) if draft else "",
        "refused": refused,
    }
    return render_page(request, TEMPLATE, context, status=status)


def _suggested_name(place: str) -> str:
    """An argument name from the place ("query.city" -> city, "path.42" -> value_42)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", place.split(".", 1)[-1])[:64].strip("_") or "value"
    return f"value_{name}"[:64] if name[0].isdigit() else name


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


def _kept_command(request: HttpRequest) -> str | None:
    """The command read last, decrypted; None when there is none (or the keys changed)."""
    kept = request.session.get(COMMAND)
    if not isinstance(kept, str):
        return None
    try:
        return decrypt(kept)
    except ImproperlyConfigured:  # (a key dropped since)
        return None
