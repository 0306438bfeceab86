"""The configuration document page: download the tenant's document (YAML or JSON), upload
or paste one, preview its diff, apply it (docs/configuration-as-code.md)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from agentplatform.web.config.common import PlainLabels, admin_required, render_page
from agents.config_document import config_export, config_import
from agents.runtime.config.loading import MAX_DOCUMENT_BYTES, dump_document

PAGE = "web/config/document.html"
FORMATS = {"yaml": "application/yaml", "json": "application/json"}


class DocumentForm(PlainLabels, forms.Form):
    upload = forms.FileField(
        required=False, label="Upload a document", help_text="A .yaml, .yml or .json file."
    )
    text = forms.CharField(
        required=False,
        label="Or paste it",
        max_length=MAX_DOCUMENT_BYTES,
        strip=False,
        widget=forms.Textarea({"rows": 16, "class": "code", "spellcheck": "false"}),
    )
    prune = forms.BooleanField(
        required=False,
        label="Delete what the document leaves out",
        help_text="Objects of every section it does not name are deleted.",
    )

    def document(self) -> str | bytes | None:
        """The uploaded file's bytes (at most one past the limit), else the pasted text."""
        upload = self.cleaned_data.get("upload")
        if upload is not None:
            return upload.read(MAX_DOCUMENT_BYTES + 1)
        return self.cleaned_data.get("text") or None


@never_cache
@admin_required
@require_http_methods(["GET", "POST"])
def document_page(request: HttpRequest) -> HttpResponse:
    """GET: the page. POST with `action` preview (the diff; nothing changes) or apply."""
    if request.method == "GET":
        return render_page(request, PAGE, {"form": DocumentForm()})
    form = DocumentForm(request.POST, request.FILES)
    if not form.is_valid():
        return render_page(request, PAGE, {"form": form}, status=400)
    text = form.document()
    if text is None:
        form.add_error(None, "Upload a document or paste one.")
        return render_page(request, PAGE, {"form": form}, status=400)
    apply = request.POST.get("action") == "apply"
    plan = config_import(
        tenant=request.tenant, text=text, prune=form.cleaned_data["prune"], dry_run=not apply,
        by=request.principal,
    )  # fmt: skip
    if plan.applied:
        messages.success(request, f"Applied {len(plan.changes)} change(s).")
        if plan.new_secrets:  # shown on this answer only, as a new webhook's page does
            context = {"form": DocumentForm(), "new_secrets": plan.new_secrets}
            return render_page(request, PAGE, context)
        return redirect("config:document", tenant_slug=request.tenant.slug)
    # The preview keeps the document in the text box, so "Apply" sends the same one.
    shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    form = DocumentForm(
        initial={"text": shown[:MAX_DOCUMENT_BYTES], "prune": form.cleaned_data["prune"]}
    )
    status = 200 if plan.valid else 400
    rows = [(change, _fields_shown(change.fields)) for change in plan.changes]
    return render_page(request, PAGE, {"form": form, "plan": plan, "rows": rows}, status=status)


def _fields_shown(fields: dict[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(field, before, after) as short JSON text, for the diff table."""
    return [
        (name, _shown(values.get("from")), _shown(values.get("to")))
        for name, values in fields.items()
    ]


def _shown(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@admin_required
@require_http_methods(["GET"])
def document_download(request: HttpRequest) -> HttpResponse:
    """The tenant's document as a file (`?format=json`; YAML otherwise)."""
    format = "json" if request.GET.get("format") == "json" else "yaml"
    text = dump_document(config_export(tenant=request.tenant), format)
    response = HttpResponse(text, content_type=f"{FORMATS[format]}; charset=utf-8")
    name = f"{request.tenant.slug}-config.{format}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response
