"""Tools: the tenant's effective registry (built-ins, definitions, context providers),
HTTP tool definitions (create, edit, delete) and a test panel that executes a tool."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.postgres.forms import SimpleArrayField
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect
from django.views.decorators.http import require_POST
from django_htmx.http import reswap

from agentplatform.web.config.common import (
    JsonTextarea,
    PlainLabels,
    PrettyJSONField,
    SecretField,
    StoredSecretForm,
    admin_required,
    confirm_delete,
    render_form,
    render_page,
    try_save,
    unique_in_tenant,
)
from agentplatform.web.config.tool_rows import ToolRows, Unrepresentable, parsed_json, rows_from
from agents.runs import tool_run
from agents.selftests import health_by_name, selftest_tools
from tenancy.request_budgets import budget_refusal
from tools import selectors
from tools.loader import tenant_tools
from tools.models import ToolDefinition, ToolKind
from tools.services import tool_definition_delete, tool_definition_save

EXAMPLE_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}},
    "required": ["city"],
}
EXAMPLE_CONFIG = {
    "method": "GET",
    "url": "https://api.example.com/weather",
    "arguments": [{"argument": "city", "to": "query", "name": "q"}],
}


class ToolDefinitionForm(StoredSecretForm, PlainLabels, forms.ModelForm):
    write_only_field = "secret"

    input_schema = PrettyJSONField(
        widget=JsonTextarea({"rows": 12}),
        label="Input schema",
        help_text="JSON Schema of the arguments the model sends: an object with properties.",
    )
    config = PrettyJSONField(
        widget=JsonTextarea({"rows": 10}),
        label="HTTP request",
        help_text='JSON: "method", "url" (with {placeholders} in the path), "arguments" '
        '(where each argument goes: path, query, header or body), optional "fixed", '
        '"context", "auth" ({"type": "bearer"}), "timeout_s".',
    )
    output_schema = PrettyJSONField(
        required=False, widget=JsonTextarea({"rows": 4}), label="Output schema (optional)"
    )
    examples = PrettyJSONField(
        required=False,
        widget=JsonTextarea({"rows": 4}),
        label="Examples with expectations (optional)",
        help_text='JSON list: [{"arguments": {...}, "expect": {"contains": "Paris"}}]; expect one '
        'of succeeds, exact, contains, regex, schema; "safe_to_run": true lets a write '
        "tool's example run. They are the tool's self-tests.",
    )
    depends_on = PrettyJSONField(
        required=False,
        widget=JsonTextarea({"rows": 3}),
        label="Inputs from other tools (optional)",
        help_text='JSON: {"customer_id": {"from": "find_customer", "path": "$.id"}}. Such an '
        "input is hidden from the model and filled from that tool's result.",
    )
    tags = SimpleArrayField(
        forms.CharField(max_length=40),
        required=False,
        help_text="Comma-separated, e.g. weather, public. Agents can pick tools by tag.",
    )
    secret = SecretField(
        label="Secret",
        help_text="The credential the auth setting sends. Write-only: never shown again; "
        "leave blank to keep the stored one.",
    )
    clear_secret = forms.BooleanField(required=False, label="Remove the stored secret")

    class Meta:
        model = ToolDefinition
        fields = [
            "name", "description", "input_schema", "config", "output_schema", "depends_on",
            "examples", "tags", "effect", "idempotent", "requires_approval", "timeout_s",
            "rate_limit_per_minute", "enabled",
        ]  # fmt: skip
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}
        labels = {"timeout_s": "Timeout (seconds)", "rate_limit_per_minute": "Calls per minute"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        stored = self.instance
        self.has_stored_secret = bool(stored.pk and stored.secret)
        if not self.has_stored_secret:
            del self.fields["clear_secret"]
        if stored.kind == ToolKind.BUILTIN:  # an alias of a built-in: its schema is fixed
            for name in ("input_schema", "config"):
                self.fields[name].required = False

    def clean_input_schema(self) -> Any:
        value = self.cleaned_data.get("input_schema")
        return {} if value is None else value

    def clean_config(self) -> Any:
        value = self.cleaned_data.get("config")
        return {} if value is None else value

    def clean_depends_on(self) -> Any:
        value = self.cleaned_data.get("depends_on")
        return {} if value is None else value

    def clean_examples(self) -> Any:
        value = self.cleaned_data.get("examples")
        return [] if value is None else value

    def clean_name(self) -> str:
        return unique_in_tenant(self, "name", "tool definition")

    def _get_validation_exclusions(self) -> set[str]:
        # The model's validation checks the secret too (auth needs one): `clean` gave it
        # the one this save would store, and its errors belong beside the secret field.
        return set(super()._get_validation_exclusions()) - {"secret"}


@admin_required
def tool_list(request: HttpRequest) -> HttpResponse:
    """This builds (or reuses) the tenant's registry and issues one query for definitions.
    Each tool's source is its origin, as recorded where it was registered."""
    definitions = selectors.definitions_of(tenant=request.tenant)
    health = health_by_name(request.tenant)
    rows = []
    toolbox = tenant_tools(request.tenant)
    for item in toolbox.registry:
        definition = definitions.get(item.name)
        origin = toolbox.origins.get(item.name)
        if definition is not None:
            source = "Definition" if definition.kind == ToolKind.HTTP else "Built-in, customised"
        elif origin is not None and origin.kind == "plugin":
            source = f"Plug-in {origin.plugin} ({origin.package})"
        else:
            source = "Context provider" if origin and origin.kind == "mcp" else "Built-in"
        row = {"tool": item, "source": source, "definition": definition}
        rows.append({**row, "health": health.get(item.name)})
    context = {"rows": rows, "definitions": list(definitions.values())}
    return render_page(request, "web/config/tool_list.html", context)


# A draft the tool form opens with (the cURL page puts it there: tool_curl.py), no secret.
PREFILL = "tool_form_prefill"


@admin_required
def tool_create(request: HttpRequest) -> HttpResponse:
    definition = ToolDefinition(tenant=request.tenant, kind=ToolKind.HTTP)
    prefill = request.session.pop(PREFILL, None) if request.method == "GET" else None
    return _tool_form(request, definition, prefill if isinstance(prefill, dict) else None)


@admin_required
def tool_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return _tool_form(request, selectors.definition_by_id(tenant=request.tenant, definition_id=pk))


def _tool_form(
    request: HttpRequest, definition: ToolDefinition, prefill: dict[str, Any] | None = None
) -> HttpResponse:
    """The tool page. An HTTP tool's arguments and request are edited as rows or as JSON
    (`editor`); htmx keeps the two in step (`sync`: "json" writes the rows into the JSON,
    "rows" shows the JSON as rows), and a save from rows writes the same JSON fields the
    JSON editor posts, through the same form and service."""
    tenant = request.tenant
    existing = definition.pk is not None
    is_http = definition.kind == ToolKind.HTTP
    if request.method == "POST" and request.POST.get("sync") in ("json", "rows"):
        return _tool_form_sync(request, definition)
    example = {"input_schema": EXAMPLE_SCHEMA, "config": EXAMPLE_CONFIG}
    initial = {} if existing else _prefilled(prefill) or example
    data = request.POST if request.method == "POST" else None
    rows, reason, rows_refused = None, "", False
    if is_http and data is not None and data.get("editor") == "form":
        rows = ToolRows(data)
        rows_refused = not rows.is_valid()
        data = data if rows_refused else _with_definition_from(rows, data)
    elif is_http:  # the rows show the JSON (as posted, stored or the example), if they can
        if data is not None:
            shown = parsed_json(data.get("input_schema")), parsed_json(data.get("config"))
        elif existing:
            shown = definition.input_schema, definition.config
        else:
            shown = initial["input_schema"], initial["config"]
        rows, reason = _rows_showing(*shown)
    form = ToolDefinitionForm(data, instance=definition, initial=initial)
    if rows_refused:
        form.is_valid()
        form.add_error(None, "Nothing was saved: fix the rows marked below.")
    save = lambda: tool_definition_save(  # noqa: E731
        tenant=tenant, definition=definition if existing else None, changes=form.changes()
    )
    if saved := try_save(request, form, save, "tool"):
        return redirect("config:tool_edit", tenant_slug=tenant.slug, pk=saved.pk)
    testable = existing and tenant_tools(tenant).registry.has(definition.name)
    context = {
        "form": form,
        "try_arguments": _example_arguments_of(definition if existing else None),
        "definition": definition if existing else None,
        "testable": testable,
        "is_http": is_http,
        **_rows_context(rows, "form" if rows is not None else "json", reason),
    }
    return render_form(request, "web/config/tool_form.html", context)


def _prefilled(prefill: dict[str, Any] | None) -> dict[str, Any]:
    """The form's initial values from a draft: the fields the form has."""
    if not prefill:
        return {}
    fields = set(ToolDefinitionForm.Meta.fields) - {"enabled"}
    initial = {name: value for name, value in prefill.items() if name in fields}
    initial.setdefault("input_schema", {"type": "object", "properties": {}})
    initial.setdefault("config", {})
    return initial


def bound_tool_form(data: QueryDict, definition: ToolDefinition) -> ToolDefinitionForm:
    """The tool form bound to a POST as a save binds it (rows written into the JSON when
    saving from rows), for a dry call; validated, with the rows' problems on top."""
    if definition.kind == ToolKind.HTTP and data.get("editor") == "form":
        rows = ToolRows(data)
        if not rows.is_valid():
            form = ToolDefinitionForm(data, instance=definition)
            form.is_valid()
            form.add_error(None, "Fix the rows: " + "; ".join(rows.problems))
            return form
        data = _with_definition_from(rows, data)
    form = ToolDefinitionForm(data, instance=definition)
    form.is_valid()
    return form


def _tool_form_sync(request: HttpRequest, definition: ToolDefinition) -> HttpResponse:
    """htmx: the JSON the rows write (sync=json; with their problems, or only those when
    they cannot be written yet), or the rows showing the posted JSON (sync=rows). Saves
    nothing."""
    data = request.POST
    template = "web/config/tool_form.html"
    is_http = definition.kind == ToolKind.HTTP
    if data["sync"] == "rows":
        schema, config = parsed_json(data.get("input_schema")), parsed_json(data.get("config"))
        rows, reason = _rows_showing(schema, config)
        context = {**_rows_context(rows, "form" if rows else "json", reason), "is_http": is_http}
        return render_page(request, template, context, partial="rows")
    rows = ToolRows(data)
    context = {**_rows_context(rows, "form", ""), "sync": True, "is_http": is_http}
    if not rows.is_valid():
        return reswap(render_page(request, template, context, partial="problems"), "none")
    schema, config = rows.definition(
        parsed_json(data.get("input_schema")), parsed_json(data.get("config"))
    )
    form = ToolDefinitionForm(
        instance=definition, initial={"input_schema": schema, "config": config}
    )
    context = {**context, "form": form}
    return render_page(request, template, context, partial="json")


def _rows_showing(schema: Any, config: Any) -> tuple[ToolRows | None, str]:
    """Rows showing this JSON, or None and why they cannot."""
    if schema is None or config is None:
        return None, "the JSON below is not valid JSON yet"
    try:
        return ToolRows(initial=rows_from(schema, config)), ""
    except Unrepresentable as refused:
        return None, str(refused)


def _rows_context(rows: ToolRows | None, editor: str, reason: str) -> dict[str, Any]:
    shown = rows is not None and editor == "form"  # the JSON fields' errors then show at the rows
    return {"rows": rows, "editor": editor, "rows_reason": reason, "rows_shown": shown}


def _with_definition_from(rows: ToolRows, data: QueryDict) -> QueryDict:
    """The POST, its JSON fields written by the (valid) rows over the JSON as posted."""
    base_schema = parsed_json(data.get("input_schema"))
    base_config = parsed_json(data.get("config"))
    schema, config = rows.definition(base_schema, base_config)
    data = data.copy()
    data["input_schema"], data["config"] = json.dumps(schema), json.dumps(config)
    return data


@admin_required
def tool_remove(request: HttpRequest, pk: int) -> HttpResponse:
    definition = selectors.definition_by_id(tenant=request.tenant, definition_id=pk)
    return confirm_delete(
        request, definition, what="tool definition", noun="tool", cancel="config:tools",
        delete=lambda: tool_definition_delete(tenant=request.tenant, definition=definition),
    )  # fmt: skip


class TryForm(PlainLabels, forms.Form):
    arguments = forms.CharField(
        widget=JsonTextarea({"rows": 6}),
        label="Arguments (JSON)",
        help_text="A JSON object matching the input schema.",
    )

    def clean_arguments(self) -> Any:
        try:
            return json.loads(self.cleaned_data["arguments"])
        except ValueError as exc:
            raise ValidationError(f"Not valid JSON: {exc}") from None


@admin_required
def tool_try(request: HttpRequest, name: str) -> HttpResponse:
    """Show one registry tool and execute it with the given arguments (htmx: the result
    only). Executing calls the tool for real, HTTP tools included, as a recorded run (like
    REST and MCP calls); a tool that requires approval is not executed but waits for one."""
    registry = tenant_tools(request.tenant).registry
    if not registry.has(name):
        raise Http404("No such tool.")
    item = registry.get(name)
    result = None
    form = TryForm(request.POST or None, initial={"arguments": _example_arguments(item)})
    if request.method == "POST" and form.is_valid():
        # (a refusal in the form, as the form's other refusals: htmx swaps 2xx answers only)
        if (refusal := budget_refusal(request.principal)) is not None:
            form.add_error(None, refusal)
        else:
            result = tool_run(
                tenant=request.tenant,
                name=name,
                arguments=form.cleaned_data["arguments"],
                user=request.user,
                via="config",
            )
    context = {
        "tool": item,
        "form": form,
        "result": result,
        "result_text": _pretty(result.result) if result is not None else "",
        "schema_text": _pretty(item.input_schema),
        "health": selectors.tool_health(tenant=request.tenant, name=name),
    }
    return render_page(request, "web/config/tool_try.html", context, partial="try-result")


@admin_required
@require_POST
def tool_selftest(request: HttpRequest, name: str) -> HttpResponse:
    """Run the tool's self-tests now (htmx: the health block only)."""
    registry = tenant_tools(request.tenant).registry
    if not registry.has(name):
        raise Http404("No such tool.")
    item = registry.get(name)
    health = refusal = None
    if item.selftests:
        refusal = budget_refusal(request.principal)
        if refusal is None:
            [health] = selftest_tools(request.tenant, [name], by=request.user)
    if not request.htmx:
        if refusal:
            messages.error(request, refusal)
        return redirect("config:tool_try", tenant_slug=request.tenant.slug, name=name)
    if refusal:  # (the block as it was, with why it was not run)
        health = selectors.tool_health(tenant=request.tenant, name=name)
    context = {"tool": item, "health": health, "health_refusal": refusal}
    return render_page(request, "web/config/tool_try.html", context, partial="health")


def _example_arguments_of(definition: ToolDefinition | None) -> str:
    examples = definition.examples if definition is not None else None
    if isinstance(examples, list) and examples and isinstance(examples[0], dict):
        return _pretty(examples[0].get("arguments", {}))
    return "{}"


def _example_arguments(item: Any) -> str:
    if item.examples:
        return _pretty(item.examples[0])
    return "{}"


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError):
        return repr(value)
