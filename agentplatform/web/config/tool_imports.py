"""Tools from an OpenAPI document, as a page (issue #40; docs/tool-import.md): the admin
uploads, pastes or links a document; the preview shows each operation as the tool the model
will see and how it differs from the tenant's tool of that name; the chosen ones are saved
at once with one secret (`tools.imports.openapi_import`).

The document is not kept between the preview and the save: the preview carries the text
back in the form (or the URL, fetched again), and the save reads and checks it again, so
what is saved is what the service accepts, whatever the browser sent."""

from __future__ import annotations

import difflib
import json
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from agentplatform.web.config.common import PlainLabels, SecretField, admin_required, render_page
from tools.imports import ImportRefused, OpenApiPreview, openapi_import, openapi_preview

MAX_DOCUMENT_BYTES = 2_000_000  # the service's bound (tools/runtime/imports/document.py)
MAX_OPERATIONS = 500
TEMPLATE = "web/config/tool_import.html"


class DocumentForm(PlainLabels, forms.Form):
    """Where the document comes from: a file, pasted text or a URL (one of them)."""

    file = forms.FileField(
        required=False, label="Upload a file", help_text="JSON or YAML, at most 2 MB."
    )
    document = forms.CharField(
        required=False,
        strip=False,
        max_length=MAX_DOCUMENT_BYTES,
        widget=forms.Textarea({"rows": 8, "class": "code", "spellcheck": "false"}),
        label="Or paste it",
    )
    url = forms.CharField(
        required=False,
        max_length=2000,
        label="Or give its URL",
        help_text="Fetched from the platform; private addresses are refused.",
        widget=forms.URLInput({"placeholder": "https://api.example.com/openapi.json"}),
    )
    base_url = forms.CharField(
        required=False,
        max_length=2000,
        label="API base URL (optional)",
        help_text="Replaces the document's servers; needed when they are relative and the "
        "document is pasted.",
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        upload = cleaned.get("file")
        if upload is not None:
            if upload.size > MAX_DOCUMENT_BYTES:
                raise forms.ValidationError("The file is larger than 2 MB.")
            try:
                cleaned["document"] = upload.read(MAX_DOCUMENT_BYTES + 1).decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError("The file is not UTF-8 text.") from None
        given = [name for name in ("document", "url") if cleaned.get(name)]
        if len(given) != 1:
            raise forms.ValidationError("Give the document: a file, its text or its URL (one).")
        return cleaned

    def source(self) -> dict[str, str | None]:
        """The service's arguments: the text or the URL, and the base URL."""
        data = self.cleaned_data
        return {
            "text": data.get("document") or None,
            "url": data.get("url") or None,
            "base_url": data.get("base_url") or None,
        }


class ImportForm(DocumentForm):
    """The save: the document again, the operations picked, the credential for them all."""

    secret = SecretField(
        label="Secret",
        help_text="The API's credential, stored on every chosen tool that sends one.",
    )
    username = forms.CharField(
        required=False, max_length=200, label="Username (basic authentication only)"
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        operations = self.data.getlist("operations") if hasattr(self.data, "getlist") else []
        if not operations:
            raise forms.ValidationError("Pick at least one operation to import.")
        if len(operations) > MAX_OPERATIONS or any(len(op) > 300 for op in operations):
            raise forms.ValidationError("That is not a choice of this document's operations.")
        cleaned["operations"] = operations
        return cleaned


@admin_required
def tool_import(request: HttpRequest) -> HttpResponse:
    """GET: where the document comes from. POST: the preview (`step=preview`) or the save
    (`step=save`) of the chosen operations, then the tools list. A refusal (the document,
    the URL, the choice, a tool the configuration refuses) is shown on top; nothing saved."""
    step = request.POST.get("step") if request.method == "POST" else None
    if step == "save":
        return _save(request)
    form = DocumentForm(request.POST or None, request.FILES or None)
    if step is None or not form.is_valid():
        return _page(request, form, status=400 if form.errors else 200)
    try:
        preview = openapi_preview(tenant=request.tenant, **form.source())
    except ImportRefused as refused:
        return _page(request, form, refused=refused, status=400)
    return _page(request, form, preview=preview, chosen=_importable(preview))


def _save(request: HttpRequest) -> HttpResponse:
    form = ImportForm(request.POST)
    if not form.is_valid():
        return _with_preview(request, form, None)
    data = form.cleaned_data
    try:
        saved = openapi_import(
            tenant=request.tenant,
            operations=data["operations"],
            secret=data.get("secret") or None,
            username=data.get("username") or None,
            **form.source(),
        )
    except ImportRefused as refused:
        return _with_preview(request, form, refused)
    names = ", ".join(d.name for d in saved)
    messages.success(
        request, f"Imported {len(saved)} tool{'s' if len(saved) > 1 else ''}: {names}."
    )
    return redirect("config:tools", tenant_slug=request.tenant.slug)


def _with_preview(request: HttpRequest, form: ImportForm, refused: ImportRefused | None):
    """The save refused: the message on top and, when the document still reads, its
    preview with the admin's choice kept."""
    preview = None
    source = form.cleaned_data if hasattr(form, "cleaned_data") else {}
    if source.get("document") or source.get("url"):
        try:
            preview = openapi_preview(tenant=request.tenant, **form.source())
        except ImportRefused as again:
            refused = refused or again
    chosen = set(request.POST.getlist("operations"))
    return _page(request, form, preview=preview, refused=refused, chosen=chosen, status=400)


def _page(
    request: HttpRequest,
    form: forms.Form,
    *,
    preview: OpenApiPreview | None = None,
    refused: ImportRefused | None = None,
    chosen: set[str] | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "form": form,
        "refused": refused,
        "preview": preview,
        "tools": [_shown(t, chosen or set()) for t in preview.tools] if preview else [],
        "needs_secret": bool(preview and any("auth" in t.draft.config for t in preview.tools)),
        "needs_username": bool(
            preview and any(_auth_type(t.draft.config) == "basic" for t in preview.tools)
        ),
        "secret": ImportForm().fields["secret"],
    }
    return render_page(request, TEMPLATE, context, status=status)


def _importable(preview: OpenApiPreview) -> set[str]:
    """What the preview ticks at first: the tools that would change something and save."""
    return {t.operation_id for t in preview.tools if t.status != "unchanged" and not t.problems}


def _shown(tool: Any, chosen: set[str]) -> dict[str, Any]:
    draft = tool.draft
    return {
        "tool": tool,
        "key": tool.operation_id or draft.source,
        "chosen": (tool.operation_id or draft.source) in chosen,
        "arguments": arguments_table(draft.input_schema),
        "schema_json": _pretty(draft.input_schema),
        "auth": _auth_type(draft.config),
        "method_url": f"{draft.config.get('method', '')} {draft.config.get('url', '')}",
        "diffs": [(name, _diff(before, after)) for name, before, after in tool.differences],
    }


def arguments_table(schema: Any) -> list[dict[str, Any]]:
    """The input schema as rows a person reads: name, type, required, description."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return []
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    return [
        {
            "name": name,
            "type": _type_text(spec),
            "required": name in required,
            "description": spec.get("description", "") if isinstance(spec, dict) else "",
        }
        for name, spec in schema["properties"].items()
    ]


def _type_text(spec: Any) -> str:
    if not isinstance(spec, dict):
        return "any"
    if isinstance(spec.get("enum"), list):
        return "one of " + ", ".join(json.dumps(v) for v in spec["enum"][:8])
    kind = spec.get("type", "any")
    text = " or ".join(map(str, kind)) if isinstance(kind, list) else str(kind)
    if kind == "array" and isinstance(spec.get("items"), dict):
        text = f"list of {_type_text(spec['items'])}"
    if spec.get("format"):
        text += f" ({spec['format']})"
    return text


def _auth_type(config: Any) -> str:
    auth = config.get("auth") if isinstance(config, dict) else None
    return str(auth.get("type", "")) if isinstance(auth, dict) else ""


def _diff(before: Any, after: Any) -> str:
    lines = difflib.unified_diff(
        _pretty(before).splitlines(), _pretty(after).splitlines(), "stored", "imported", lineterm=""
    )
    return "\n".join(list(lines)[2:]) or "(formatting only)"


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)
