""" "Try it" in the tool form: the form's current fields, unsaved, tried once with the given
arguments (the dry call, `agents.runs.dry_call`; docs/tool-import-curl.md). htmx posts the
whole form here and gets the result panel: the prepared request (its credential masked),
the service's status and answer, what the model would read and the output-schema check.

A saved tool being edited keeps its stored secret when the secret field is left blank, as
saving it would. Nothing is saved; the call is recorded as a run."""

from __future__ import annotations

import copy
import json
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_POST

from agentplatform.web.config.common import admin_required, render_page
from agentplatform.web.config.tools import bound_tool_form
from agents.runs import dry_call
from tenancy.request_budgets import budget_refusal
from tools import selectors
from tools.models import ToolDefinition, ToolKind

MAX_ARGUMENTS_CHARS = 100_000


@admin_required
@require_POST
def tool_dry_call(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    """The result panel (htmx) or a page with it. `try=show` prepares the request only."""
    saved = None
    if pk is not None:
        saved = selectors.definition_by_id(tenant=request.tenant, definition_id=pk)
    shown = copy.copy(saved) if saved is not None else ToolDefinition(tenant=request.tenant)
    shown.kind = shown.kind or ToolKind.HTTP
    form = bound_tool_form(request.POST, shown)  # (the form changes its instance: a copy)
    problems: list[str] = []
    arguments = _arguments(request.POST.get("try_arguments", "{}"), problems)
    if form.errors:
        problems += [
            f"{_label(form, name)}: {' '.join(errors)}" for name, errors in form.errors.items()
        ]
    result = None
    send = request.POST.get("try") != "show"
    refusal_status = 400
    refusal = budget_refusal(request.principal) if send and not problems else None
    if refusal is not None:  # (only a call that is sent counts)
        problems, refusal_status = [refusal], 429
    if not problems:
        changes = form.changes()
        changes.pop("enabled", None)
        secret = (changes.pop("secret") or "") if "secret" in changes else None
        try:
            result = dry_call(
                tenant=request.tenant,
                user=request.user,
                fields={**changes, "kind": ToolKind.HTTP} if saved is None else changes,
                secret=secret,
                arguments=arguments,
                definition=saved,
                send=send,
            )
        except ValidationError as refused:
            problems = _messages(refused)
    context = {
        "result": result,
        "problems": problems,
        "answer_text": _pretty_answer(result.answer) if result else "",
        "model_view_text": _pretty(result.model_view) if result else "",
        "definition": saved,
    }
    # htmx swaps only 2xx answers: the panel shows the refusal, a page without it is a 400.
    status = refusal_status if problems and not request.htmx else 200
    template = "web/config/tool_dry_call.html"
    return render_page(request, template, context, partial="result", status=status)


def _arguments(text: str, problems: list[str]) -> Any:
    if len(text) > MAX_ARGUMENTS_CHARS:
        problems.append("Arguments: at most 100,000 characters.")
        return {}
    try:
        value = json.loads(text or "{}")
    except (ValueError, RecursionError):
        problems.append("Arguments: not valid JSON.")
        return {}
    if not isinstance(value, dict):
        problems.append('Arguments: give a JSON object, {"name": value, …}.')
        return {}
    return value


def _label(form: Any, name: str) -> str:
    return str(form.fields[name].label or name) if name in form.fields else "The tool"


def _messages(error: ValidationError) -> list[str]:
    if hasattr(error, "error_dict"):
        return [f"{name.replace('_', ' ')}: {' '.join(texts)}"
                for name, texts in error.message_dict.items()]  # fmt: skip
    return list(error.messages)


def _pretty(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _pretty_answer(text: str) -> str:
    """A JSON answer indented; any other answer as it came."""
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, indent=2)
    except (ValueError, RecursionError):
        return text
