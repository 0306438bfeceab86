"""The tool page's form instead of JSON: arguments as rows, the request as fields, fixed
headers and query as key-value rows, and what the model sees of an answer as picked fields.

Rows are a second way to write a definition's `input_schema` and `config`: `rows_from`
shows a definition as rows (or says why it cannot: nested objects, anyOf, a reference
argument...), `ToolRows.definition` writes them back. The config keys rows do not cover
(retry, circuit, context values, a fixed body, references...) are kept from the JSON. The
save service validates the result exactly as it validates JSON; the checks here only put
the commonest mistakes beside their row.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from django import forms

from agentplatform.web.config.common import PlainLabels
from tools.runtime.http_tool import PLACEHOLDER

ARGUMENT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
TYPES = [
    ("string", "text"),
    ("integer", "whole number"),
    ("number", "number"),
    ("boolean", "yes / no"),
    ("array", "list of text"),
    ("object", "object (any JSON)"),
]
ENUM_TYPES = {"string", "integer", "number"}
LOCATIONS = [("query", "query"), ("path", "path"), ("header", "header"), ("body", "body")]
LOCATIONS += [("", "not sent")]
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
AUTH_TYPES = [("", "none"), ("bearer", "bearer token"), ("header", "API key in a header")]
AUTH_TYPES += [("basic", "basic (username and secret)")]
ROW_CONFIG_KEYS = ("method", "url", "arguments", "fixed", "auth", "timeout_s", "model_view")
MAX_ROWS = 100


class Unrepresentable(ValueError):
    """The definition has something rows cannot show; the message says what (safe to show)."""


def rows_from(input_schema: Any, config: Any) -> dict[str, Any]:
    """The rows' initial data for a definition, or Unrepresentable."""
    try:
        return _rows_from(input_schema, config)
    except (TypeError, AttributeError, KeyError):  # a value of a type rows never expect
        raise Unrepresentable("the JSON holds a value of an unexpected type") from None


def _rows_from(input_schema: Any, config: Any) -> dict[str, Any]:
    if not isinstance(input_schema, dict) or not isinstance(config, dict):
        raise Unrepresentable("the input schema and the request must be JSON objects")
    if extra := set(input_schema) - {"type", "properties", "required", "additionalProperties"}:
        raise Unrepresentable(f"the input schema uses {', '.join(sorted(extra))}")
    properties = input_schema.get("properties", {})
    required = input_schema.get("required", [])
    if input_schema.get("type", "object") != "object" or not isinstance(properties, dict):
        raise Unrepresentable("the input schema is not an object with properties")
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        raise Unrepresentable("the input schema's required list is not a list of names")
    if not set(required) <= set(properties):
        raise Unrepresentable("the input schema's required list names unknown arguments")
    targets = _targets_by_argument(config, properties)
    # In the order of the mapping (a list): a stored schema's properties come back sorted
    # (jsonb keeps no key order).
    order = {name: index for index, name in enumerate(targets)}
    arguments = [
        _argument_row(name, properties[name], name in required, targets.get(name))
        for name in sorted(properties, key=lambda name: order.get(name, len(order)))
    ]
    fixed = config.get("fixed", {})
    if not isinstance(fixed, dict):
        raise Unrepresentable("the fixed values are not an object")
    return {
        "request": _request_fields(config),
        "arguments": arguments,
        "headers": _pairs(fixed.get("headers", {}), "fixed headers"),
        "query": _pairs(fixed.get("query", {}), "fixed query values"),
        "view": [
            {"field": field, "path": path}
            for field, path in _pairs(config.get("model_view") or {}, "the model's view")
        ],
    }


def _targets_by_argument(config: dict, properties: dict) -> dict[str, dict]:
    targets: dict[str, dict] = {}
    listed = config.get("arguments", [])
    if not isinstance(listed, list):
        raise Unrepresentable("the request's arguments are not a list")
    for target in listed:
        if not isinstance(target, dict) or target.get("reference"):
            raise Unrepresentable("an argument takes a reference token")
        argument = target.get("argument")
        if not isinstance(argument, str):
            raise Unrepresentable("an argument's mapping names no argument")
        if argument in targets or argument not in properties:
            raise Unrepresentable(f"the argument {argument!r} is mapped twice or is unknown")
        targets[argument] = target
    return targets


def _argument_row(name: str, schema: Any, required: bool, target: dict | None) -> dict:
    if not ARGUMENT_NAME.match(name) or not isinstance(schema, dict):
        raise Unrepresentable(f"the argument {name!r} cannot be a row")
    kind = schema.get("type")
    if kind is not None and not isinstance(kind, str):  # (a list of types)
        raise Unrepresentable(f"the argument {name!r} has no single type")
    allowed = {"type", "description"} | ({"enum"} if kind in ENUM_TYPES else set())
    if kind == "array":
        allowed.add("items")
        if schema.get("items", {"type": "string"}) != {"type": "string"}:
            raise Unrepresentable(f"the argument {name!r} is a list of something else than text")
    if kind not in dict(TYPES) or set(schema) - allowed:
        what = kind if kind not in dict(TYPES) else ", ".join(sorted(set(schema) - allowed))
        raise Unrepresentable(f"the argument {name!r} uses {what or 'no type'}")
    if kind == "object" and set(schema) - {"type", "description"}:
        raise Unrepresentable(f"the argument {name!r} is a nested object")
    enum = schema.get("enum", [])
    if not isinstance(enum, list) or any(
        isinstance(v, bool | dict | list) or v is None or "," in str(v) for v in enum
    ):
        raise Unrepresentable(f"the argument {name!r} has values rows cannot list")
    description = schema.get("description", "")
    return {
        "name": name,
        "type": kind,
        "description": description if isinstance(description, str) else "",
        "required": required,
        "enum": ", ".join(str(v) for v in enum),
        "to": target["to"] if target else "",
        "destination": (target.get("name") or "") if target else "",
    }


def _request_fields(config: dict) -> dict[str, Any]:
    auth = config.get("auth") or {}
    if not isinstance(auth, dict):
        raise Unrepresentable("the auth setting is not an object")
    return {
        "method": config.get("method", "GET"),
        "url": config.get("url", ""),
        "auth_type": auth.get("type", ""),
        "auth_header": auth.get("header", "") if auth.get("type") == "header" else "",
        "auth_username": auth.get("username", ""),
        "timeout_s": config.get("timeout_s"),
    }


def _pairs(values: Any, what: str) -> list[tuple[str, str]]:
    if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
        raise Unrepresentable(f"the {what} are not all text")
    return list(values.items())


class ArgumentRow(forms.Form):
    name = forms.CharField(max_length=64, required=False)
    type = forms.ChoiceField(choices=TYPES, initial="string")
    description = forms.CharField(max_length=2000, required=False)
    required = forms.BooleanField(required=False)
    enum = forms.CharField(max_length=2000, required=False, label="Allowed values")
    to = forms.ChoiceField(choices=LOCATIONS, required=False, initial="query", label="Goes to")
    destination = forms.CharField(
        max_length=100,
        required=False,
        label="Name there",
        widget=forms.TextInput(attrs={"placeholder": "its own"}),
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        name = data.get("name", "")
        if not name:
            self.add_error("name", "Name the argument.")
        elif not ARGUMENT_NAME.match(name):
            self.add_error("name", "Use letters, digits, _ or -, starting with a letter or _.")
        kind, enum = data.get("type"), data.get("enum", "")
        if enum and kind not in ENUM_TYPES:
            self.add_error("enum", "Only text and numbers can have a list of allowed values.")
        elif enum and kind:
            try:
                data["enum"] = [_typed(v.strip(), kind) for v in enum.split(",") if v.strip()]
            except ValueError:
                self.add_error("enum", f"Each allowed value must be a {dict(TYPES)[kind]}.")
        return data


def _typed(value: str, kind: str) -> str | int | float:
    if kind == "integer":
        return int(value)
    if kind == "number":
        number = float(value)
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError(value)
        return int(number) if number.is_integer() and "." not in value else number
    return value


class PairRow(forms.Form):
    key = forms.CharField(max_length=100, required=False, label="Name")
    value = forms.CharField(max_length=2000, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("key"):
            self.add_error("key", "Name it.")
        return data


class ViewRow(forms.Form):
    field = forms.CharField(max_length=100, required=False)
    path = forms.CharField(max_length=400, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("field"):
            self.add_error("field", "Name the field the model sees.")
        return data


class RowFormSet(forms.BaseFormSet):
    """Rows the browser adds and removes: a row left blank (or an index removed) is skipped."""

    def _construct_form(self, i: int, **kwargs: Any) -> forms.Form:
        kwargs.update(empty_permitted=True, use_required_attribute=False)
        return super()._construct_form(i, **kwargs)

    def rows(self) -> list[tuple[forms.Form, dict[str, Any]]]:
        return [(f, f.cleaned_data) for f in self.forms if f.cleaned_data]


def _formset(form: type[forms.Form]) -> type[RowFormSet]:
    return forms.formset_factory(
        form, formset=RowFormSet, extra=1, max_num=MAX_ROWS, absolute_max=MAX_ROWS,
        validate_max=True,
    )  # fmt: skip


ArgumentFormSet = _formset(ArgumentRow)
PairFormSet = _formset(PairRow)
ViewFormSet = _formset(ViewRow)


class RequestForm(PlainLabels, forms.Form):
    method = forms.ChoiceField(choices=[(m, m) for m in METHODS])
    url = forms.CharField(
        max_length=2000,
        label="URL",
        help_text="Put a path argument in braces: https://api.example.com/pets/{pet_id}.",
    )
    auth_type = forms.ChoiceField(choices=AUTH_TYPES, required=False, label="Authentication")
    auth_header = forms.CharField(
        max_length=100, required=False, label="Header name", help_text="Default: X-API-Key."
    )
    auth_username = forms.CharField(max_length=200, required=False, label="Username")
    timeout_s = forms.FloatField(
        required=False, min_value=0.1, max_value=120, label="Request timeout (seconds)",
        help_text="Empty: 10 seconds.",
    )  # fmt: skip


class ToolRows:
    """The rows of one tool form: bound to a POST (prefixes `req`, `arg`, `hdr`, `qry`,
    `view`) or showing `initial` (from `rows_from`)."""

    def __init__(self, data: Any = None, initial: dict[str, Any] | None = None) -> None:
        initial = initial or {"request": {"method": "GET"}}
        pairs = lambda items: [{"key": k, "value": v} for k, v in items]  # noqa: E731
        self.request = RequestForm(data, initial=initial["request"], prefix="req")
        self.arguments = ArgumentFormSet(data, initial=initial.get("arguments"), prefix="arg")
        self.headers = PairFormSet(data, initial=pairs(initial.get("headers", [])), prefix="hdr")
        self.query = PairFormSet(data, initial=pairs(initial.get("query", [])), prefix="qry")
        self.view = ViewFormSet(data, initial=initial.get("view"), prefix="view")

    def is_valid(self) -> bool:
        lists = [self.arguments, self.headers, self.query, self.view]
        if not all([part.is_valid() for part in [self.request, *lists]]):  # (all, for errors)
            return False
        self._check_across_rows()  # (adds errors to the forms)
        return not self.request.errors and not any(f.errors for s in lists for f in s.forms)

    @property
    def problems(self) -> list[str]:
        """Every error of the rows, as "where: what" lines (a summary beside the form)."""
        found = [
            f"{self.request[name].label}: {' '.join(e)}" for name, e in self.request.errors.items()
        ]
        for what, rows in (("Argument", self.arguments), ("Header", self.headers),
                           ("Query value", self.query), ("Field", self.view)):  # fmt: skip
            found += (
                [f"{what}s: {' '.join(rows.non_form_errors())}"] if rows.non_form_errors() else []
            )
            for number, form in enumerate(rows.forms, 1):
                found += [
                    f"{what} {number}, {form[name].label.lower()}: {' '.join(errors)}"
                    for name, errors in form.errors.items()
                ]
        return found

    def _check_across_rows(self) -> None:
        seen: set[str] = set()
        for form, row in self.arguments.rows():
            if row.get("name") in seen:
                form.add_error("name", "Another argument has this name.")
            seen.add(row.get("name", ""))
        url = self.request.cleaned_data.get("url", "")
        try:
            placeholders = set(PLACEHOLDER.findall(urlsplit(url).path))
        except ValueError:
            return  # the save service says what is wrong with the URL
        in_path = set()
        for form, row in self.arguments.rows():
            if row.get("to") == "path":
                name = row.get("destination") or row.get("name", "")
                in_path.add(name)
                if name not in placeholders:
                    form.add_error("to", f"The URL has no {{{name}}} placeholder.")
        if missing := sorted(placeholders - in_path):
            listed = ", ".join(f"{{{name}}}" for name in missing)
            verb = "has" if len(missing) == 1 else "have"
            self.request.add_error(
                "url", f"{listed} {verb} no argument: add one that goes to the path."
            )
        fields: set[str] = set()
        for form, row in self.view.rows():
            if row.get("field") in fields:
                form.add_error("field", "Another field has this name.")
            fields.add(row.get("field", ""))

    def definition(self, base_schema: Any, base_config: Any) -> tuple[dict, dict]:
        """The input_schema and config the valid rows write; `base_*` (the JSON as
        posted) give what rows do not cover."""
        properties: dict[str, dict] = {}
        required, targets = [], []
        for _, row in self.arguments.rows():
            name, kind = row["name"], row["type"]
            schema: dict[str, Any] = {"type": kind}
            if kind == "array":
                schema["items"] = {"type": "string"}
            if row["description"]:
                schema["description"] = row["description"]
            if row["enum"]:
                schema["enum"] = row["enum"]
            properties[name] = schema
            if row["required"]:
                required.append(name)
            if row["to"]:
                target = {"argument": name, "to": row["to"]}
                if row["destination"] and row["destination"] != name:
                    target["name"] = row["destination"]
                targets.append(target)
        input_schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            input_schema["required"] = required
        if isinstance(base_schema, dict) and "additionalProperties" in base_schema:
            input_schema["additionalProperties"] = base_schema["additionalProperties"]
        return input_schema, self._config(targets, base_config)

    def _config(self, targets: list[dict], base: Any) -> dict[str, Any]:
        request = self.request.cleaned_data
        base = base if isinstance(base, dict) else {}
        config: dict[str, Any] = {"method": request["method"], "url": request["url"]}
        config["arguments"] = targets
        base_fixed = base.get("fixed") if isinstance(base.get("fixed"), dict) else {}
        fixed = {k: v for k, v in base_fixed.items() if k not in ("headers", "query")}
        for key, rows in (("headers", self.headers), ("query", self.query)):
            if pairs := {row["key"]: row["value"] for _, row in rows.rows()}:
                fixed[key] = pairs
        if fixed:
            config["fixed"] = fixed
        if auth_type := request.get("auth_type"):
            auth = {"type": auth_type}
            if auth_type == "header" and request.get("auth_header"):
                auth["header"] = request["auth_header"]
            if auth_type == "basic":
                auth["username"] = request.get("auth_username", "")
            config["auth"] = auth
        if request.get("timeout_s") is not None:
            config["timeout_s"] = request["timeout_s"]
        if view := {row["field"]: row["path"] for _, row in self.view.rows()}:
            config["model_view"] = view
        config.update({k: v for k, v in base.items() if k not in ROW_CONFIG_KEYS})
        return config


def parsed_json(text: Any) -> Any:
    """A posted JSON field's value, or None when it is not JSON (or nested too deeply to
    parse)."""
    try:
        return json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        return None
