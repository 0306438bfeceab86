"""Agents, runs, approvals, facts and conversations in the tenant-scoped admin.

The agent change page lists the tools the saved configuration gets, and the try page runs
the agent inline (the request waits for the whole run; no Celery). Runs are read-only
records shown with their event timeline. Approvals are decided with list actions, which
call the same service as the browser and REST paths.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from agents import memory, quotas
from agents.fallback_forms import FallbacksField
from agents.grants_admin import UseGrantsAdmin
from agents.models import (
    MAX_INPUT_CHARS,
    Agent,
    Approval,
    ApprovalDeciders,
    ApprovalStatus,
    Conversation,
    Fact,
    FactScope,
    Message,
    Quota,
    Run,
    RunEvent,
)
from agents.publishing_admin import GatedAdmin
from agents.runs import approval_decide, request_text, run_cancel, run_inline, tool_run
from agents.runtime.spec import RunStatus
from agents.tool_sources import effective_tools
from providers.models import ProviderConnection
from tenancy.models import Tenant
from tenancy.request_budgets import user_budget_refusal
from tenancy.scoped_admin import (
    ReadOnlyAdmin,
    TenantScopedAdmin,
    TenantScopedForm,
    TenantScopedInline,
)
from tools.admin import ToolDefinitionAdmin
from tools.models import ToolDefinition

_JSON = forms.Textarea(attrs={"rows": 8, "cols": 80, "class": "vLargeTextField"})
TIMELINE_LIMIT = 500  # events shown on one page; the page says when more were left out
PAYLOAD_CHARS = 300
STATE_PREVIEW_CHARS = 20_000


# -- shared display helpers ----------------------------------------------------------
def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact_json(value: Any, limit: int = PAYLOAD_CHARS) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    return _shorten(text, limit)


def run_duration(run: Run) -> str:
    if run.started_at is None:
        return "—"
    if run.finished_at is None:
        return "running" if run.status == RunStatus.RUNNING else "—"
    seconds = (run.finished_at - run.started_at) / timedelta(seconds=1)
    return f"{seconds:.2f} s"


@dataclass(frozen=True)
class TimelineRow:
    seq: int
    type: str
    offset_ms: int  # since the first shown event
    payload: str


def run_timeline(run: Run, limit: int = TIMELINE_LIMIT) -> tuple[list[TimelineRow], bool]:
    """The run's first `limit` events in seq order, and whether there are more. One query."""
    events = list(
        RunEvent.objects.filter(run_id=run.pk)
        .order_by("seq")
        .values_list("seq", "type", "payload", "created_at")[: limit + 1]
    )
    start = events[0][3] if events else None
    rows = [
        TimelineRow(seq, type_, int((at - start) / timedelta(milliseconds=1)), compact_json(data))
        for seq, type_, data, at in events[:limit]
    ]
    return rows, len(events) > limit


# -- agents --------------------------------------------------------------------------
class AgentForm(TenantScopedForm):
    class Meta:
        model = Agent
        fields = [
            "tenant", "name", "slug", "description", "active", "instructions", "output_schema",
            "approval_policy", "approval_deciders", "approval_group", "approval_not_starter",
            "memory", "memory_scope", "memory_retention_days", "memory_key_runs",
            "results_without_tools", "code_mode", "verifier_tool", "provider_connection", "model",
            "fallbacks", "load_balancing", "temperature",
            "compaction_threshold", "compaction_connection", "compaction_model",
            "use_all_tools", "tool_names", "tool_tags", "tool_exclude", "max_rounds",
            "max_tool_calls", "max_tokens_per_run",
        ]  # fmt: skip
        widgets = {
            "instructions": forms.Textarea(attrs={"rows": 10, "cols": 80}),
            "output_schema": _JSON,
        }
        help_texts = {
            "output_schema": "A JSON Schema object: the agent answers with a final_answer "
            "tool call matching it. Empty: a plain text answer.",
            "tool_names": "Comma-separated tool names (when not using all tools).",
            "tool_tags": "Comma-separated tags: tools carrying any of them are included.",
            "tool_exclude": "Comma-separated tool names never offered to this agent.",
        }

    fallbacks = FallbacksField()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if "approval_deciders" in self.fields:
            self.fields["approval_deciders"].required = False  # absent: the default
        if "fallbacks" in self.fields:
            tenant_id = self.instance.tenant_id
            found = ProviderConnection.objects.filter(tenant_id=tenant_id) if tenant_id else ()
            self.fields["fallbacks"].connection_names = [c.name for c in found]

    def clean_approval_deciders(self) -> str:
        return self.cleaned_data.get("approval_deciders") or ApprovalDeciders.STARTER


@admin.register(Agent)
class AgentAdmin(GatedAdmin, UseGrantsAdmin, TenantScopedAdmin):
    form = AgentForm
    list_display = [
        "name", "slug", "model_label", "approval_policy", "memory", "active", "version",
        "try_link", "grants_link",
    ]  # fmt: skip
    list_filter = ["active", "approval_policy", "memory"]
    search_fields = ["name", "slug", "description"]
    readonly_fields = ["version", "updated_at", "effective_tools"]

    def get_fieldsets(self, request, obj=None):
        head = ["name", "slug", "description", "active"]
        if obj is not None or self._implied_tenant(request) is None:
            head.insert(0, "tenant")
        tools = ["use_all_tools", "tool_names", "tool_tags", "tool_exclude"]
        behaviour = [
            "instructions", "output_schema", "approval_policy", "memory", "memory_scope",
            "memory_retention_days", "memory_key_runs", "results_without_tools", "code_mode",
            "verifier_tool",
        ]  # fmt: skip
        fieldsets = [
            (None, {"fields": head}),
            ("Behaviour", {"fields": behaviour}),
            ("Model", {"fields": ["provider_connection", "model", "fallbacks",
                                  "load_balancing", "temperature"]}),
            ("Long conversations", {"fields": ["compaction_threshold", "compaction_connection",
                                               "compaction_model"]}),
            ("Tools", {"fields": [*tools, "effective_tools"] if obj else tools}),
            ("Approvals", {"fields": ["approval_deciders", "approval_group",
                                      "approval_not_starter"]}),
            ("Limits", {"fields": ["max_rounds", "max_tool_calls", "max_tokens_per_run"]}),
        ]  # fmt: skip
        if obj is not None:
            fieldsets.append(("Version", {"fields": ["version", "updated_at"]}))
        return fieldsets

    @admin.display(description="Model", ordering="model")
    def model_label(self, obj: Agent) -> str:
        return obj.model or "connection default"

    @admin.display(description="")
    def try_link(self, obj: Agent) -> str:
        return format_html('<a href="{}">Try</a>', reverse("admin:agents_agent_try", args=[obj.pk]))

    @admin.display(description="Effective tools")
    def effective_tools(self, obj: Agent) -> str:
        """For the saved configuration: a failed POST has already changed `obj` in memory."""
        if obj.pk is None:
            return "Save the agent to see its tools."
        saved = Agent.objects.select_related("tenant").get(pk=obj.pk)
        tools = effective_tools(saved)
        rows = format_html_join(
            "",
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    t.name,
                    t.source,
                    str(t.capability.effect),
                    "yes" if t.capability.requires_approval else "",
                    _shorten(" ".join(t.description.split()), 120),
                )
                for t in tools
            ),
        )
        unknown = tools.unknown
        table = format_html(
            '<table id="effective-tools"><thead><tr><th>Tool</th><th>Source</th>'
            "<th>Effect</th><th>Requires approval</th><th>Description</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            rows or format_html('<tr><td colspan="5">{}</td></tr>', "No tools."),
        )
        if not unknown:
            return table
        return format_html(
            '{}<p class="errornote">Unknown tool names (ignored): {}</p>', table, ", ".join(unknown)
        )

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:pk>/try/", view(self.try_view), name="agents_agent_try"),
            *super().get_urls(),  # UseGrantsAdmin's access view first, then the admin's
        ]

    def try_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Runs the agent in this request: the response waits for the whole run."""
        agent = self.get_object(request, str(pk))
        if agent is None or not self.has_change_permission(request, agent):
            raise Http404("No such agent.")
        form = TryAgentForm(request.POST or None)
        run = None
        status = 200
        if request.method == "POST" and form.is_valid():
            if (refusal := user_budget_refusal(request.user, agent.tenant)) is not None:
                form.add_error(None, refusal)
                status = 429
            else:
                run = self._try(request, agent, form)
        timeline, truncated = run_timeline(run) if run else ([], False)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Try {agent.name}",
            "opts": self.opts,
            "original": agent,
            "agent": agent,
            "form": form,
            "run": run,
            "duration": run_duration(run) if run else "",
            "structured_json": (
                json.dumps(run.structured_output, indent=2, ensure_ascii=False)
                if run and run.structured_output is not None
                else ""
            ),
            "timeline": timeline,
            "timeline_truncated": truncated,
        }
        return render(request, "admin/agents/try_agent.html", context, status=status)

    def _try(self, request: HttpRequest, agent: Agent, form: TryAgentForm) -> Run | None:
        try:
            return run_inline(
                tenant=agent.tenant,
                agent=agent,
                input=form.cleaned_data["message"],
                initiated_by=request.user,
            )
        except PermissionDenied as exc:
            form.add_error(None, str(exc))
        except ValidationError as exc:
            form.add_error(None, exc.messages)
        return None


class TryAgentForm(forms.Form):
    message = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "class": "vLargeTextField"}),
        max_length=MAX_INPUT_CHARS,
    )


# -- runs ----------------------------------------------------------------------------
RUN_FIELDSETS = [
    (None, {"fields": ["tenant", "agent", "status", "input", "output", "structured_output",
                       "error"]}),
    ("Model", {"fields": ["provider", "model", "instructions_digest", "tools_digest", "limits"]}),
    ("Usage", {"fields": ["input_tokens", "output_tokens", "cache_read_tokens",
                          "cache_write_tokens", "cost_usd", "total_cost_usd"]}),
    ("Origin", {"fields": ["initiated_by_user", "initiated_by_api_key", "conversation",
                           "in_reply_to", "parent", "correlation_id", "idempotency_key"]}),
    ("Timing", {"fields": ["created_at", "started_at", "finished_at", "duration", "attempts",
                           "lease_owner", "lease_expires_at", "last_seq"]}),
    ("Checkpoint", {"fields": ["state_summary"]}),
]  # fmt: skip


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin, TenantScopedAdmin):
    """Read-only: runs change only through the runtime and the run services."""

    list_display = [
        "id", "agent", "status", "model", "tokens", "total_cost_usd", "created_at", "duration"
    ]  # fmt: skip
    list_filter = ["status", "agent", "workflow", "trigger"]
    list_select_related = ["agent"]
    search_fields = ["correlation_id"]
    fieldsets = RUN_FIELDSETS
    readonly_fields = [name for _, options in RUN_FIELDSETS for name in options["fields"]]
    actions = ["cancel_selected"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("state")  # loaded only where shown

    def has_cancel_permission(self, request) -> bool:
        return self._may(request, None)

    @admin.display(description="Tokens")
    def tokens(self, obj: Run) -> int:
        return obj.input_tokens + obj.output_tokens

    @admin.display(description="Duration")
    def duration(self, obj: Run) -> str:
        return run_duration(obj)

    @admin.display(description="State")
    def state_summary(self, obj: Run) -> str:
        if obj.state is None:
            return "—"
        text = json.dumps(obj.state, ensure_ascii=False, indent=1, default=str)
        shown = text if len(text) <= STATE_PREVIEW_CHARS else text[:STATE_PREVIEW_CHARS] + "\n…"
        return format_html(
            "<details><summary>Checkpoint, {} KB</summary><pre>{}</pre></details>",
            f"{len(text) / 1024:.1f}",
            shown,
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        run = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        if run is not None:
            timeline, truncated = run_timeline(run)
            extra.update(
                timeline=timeline,
                timeline_truncated=truncated,
                approvals=list(run.approvals.order_by("created_at")),
            )
        return super().change_view(request, object_id, form_url, extra)

    @admin.action(description="Cancel selected runs", permissions=["cancel"])
    def cancel_selected(self, request, queryset) -> None:
        """Queued and parked runs stop now; a running one stops at its next check."""
        stopped = flagged = 0
        for run in queryset.select_related("tenant"):
            if run.is_terminal:
                continue
            try:
                run = run_cancel(tenant=run.tenant, run=run, by=request.user)
            except PermissionDenied as exc:
                self.message_user(request, f"Run #{run.pk}: {exc}", messages.WARNING)
                continue
            if run.status == RunStatus.CANCELLED:
                stopped += 1
            else:
                flagged += 1
        note = f" {flagged} running run(s) will stop at their next step." if flagged else ""
        self.message_user(request, f"Cancelled {stopped} run(s).{note}")


# -- approvals -----------------------------------------------------------------------
class PendingFirstStatusFilter(admin.SimpleListFilter):
    """Status, showing pending approvals until another choice (or "All") is made."""

    title = "status"
    parameter_name = "status"
    ALL = "all"

    def lookups(self, request, model_admin):
        return [*ApprovalStatus.choices, (self.ALL, "All")]

    def _chosen(self) -> str:
        return self.value() or ApprovalStatus.PENDING

    def choices(self, changelist):
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self._chosen() == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request, queryset):
        chosen = self._chosen()
        return queryset if chosen == self.ALL else queryset.filter(status=chosen)


class EditArgumentsForm(forms.Form):
    arguments = forms.JSONField(
        widget=forms.Textarea(attrs={"rows": 8, "cols": 60}),
        help_text="A JSON object. An HTTP tool's request is prepared again from it and "
        "shown for approval; nothing is sent until that is approved.",
    )

    def clean_arguments(self):
        value = self.cleaned_data["arguments"]
        if not isinstance(value, dict):
            raise forms.ValidationError("Enter a JSON object.")
        return value


class RejectForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        initial="Rejected in the admin.",
        max_length=2000,
        help_text="The model reads this as the tool's result.",
    )


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin, TenantScopedAdmin):
    """Decided through the actions; the rows themselves are read-only (never deleted: a
    parked run waits on its approvals)."""

    list_display = [
        "tool_name", "arguments_compact", "run_link", "status", "created_at", "decided_by_label",
    ]  # fmt: skip
    list_filter = [PendingFirstStatusFilter, "tool_name"]
    list_select_related = ["run"]
    fields = [
        "tenant", "run_link", "tool_name", "call_id", "arguments", "request_shown", "status",
        "decided_by_label", "decided_at", "reason", "edited_arguments", "replaced_by_link",
        "created_at",
    ]  # fmt: skip
    readonly_fields = fields
    actions = ["approve_selected", "reject_selected"]

    def has_decide_permission(self, request) -> bool:
        return self._may(request, None)

    @admin.display(description="Arguments")
    def arguments_compact(self, obj: Approval) -> str:
        return format_html("<code>{}</code>", compact_json(obj.arguments, 120))

    @admin.display(description="Request")
    def request_shown(self, obj: Approval) -> str:
        """The exact request approving sends (an HTTP tool's), credential masked."""
        if obj.prepared_request is None:
            return "—"
        return format_html("<pre>{}</pre>", request_text(obj.prepared_request))

    @admin.display(description="Asked again as")
    def replaced_by_link(self, obj: Approval) -> str:
        if obj.replaced_by_id is None:
            return "—"
        url = reverse("admin:agents_approval_change", args=[obj.replaced_by_id])
        return format_html('<a href="{}">Tool call #{}</a>', url, obj.replaced_by_id)

    @admin.display(description="Run", ordering="run")
    def run_link(self, obj: Approval) -> str:
        url = reverse("admin:agents_run_change", args=[obj.run_id])
        return format_html('<a href="{}">Run {} ({})</a>', url, obj.run_id, obj.run.status)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = dict(extra_context or {})
        if self.has_decide_permission(request):  # buttons posting the list's actions
            extra["decide_actions"] = [
                ("approve_selected", "Approve"),
                ("reject_selected", "Reject…"),
            ]
            extra["action_checkbox_name"] = helpers.ACTION_CHECKBOX_NAME
        return super().change_view(request, object_id, form_url, extra)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:pk>/edit/", view(self.edit_view), name="agents_approval_edit"),
            *super().get_urls(),
        ]

    def edit_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Approve with edited arguments. A call with a prepared request is prepared again
        and asked again (the new approval's page follows); others run with the edit."""
        approval = self.get_object(request, str(pk))
        if approval is None or not self.has_view_permission(request, approval):
            raise Http404("No such approval.")
        if not self.has_decide_permission(request):
            raise PermissionDenied
        form = EditArgumentsForm(
            request.POST or None, initial={"arguments": json.dumps(approval.arguments, indent=2)}
        )
        if request.method == "POST" and form.is_valid():
            try:
                approval = approval_decide(
                    tenant=approval.tenant,
                    approval=approval,
                    approved=True,
                    by=request.user,
                    arguments=form.cleaned_data["arguments"],
                )
            except PermissionDenied as exc:  # the agent's approval authority
                form.add_error(None, str(exc))
            except ValidationError as exc:
                form.add_error(None, " ".join(exc.messages))
            else:
                if approval.replaced_by_id is not None:
                    self.message_user(
                        request, "The request was prepared again: approve it to send it."
                    )
                    target = approval.replaced_by_id
                else:
                    self.message_user(request, "Approved with the edited arguments.")
                    target = approval.pk
                return redirect("admin:agents_approval_change", target)
        context = {
            **self.admin_site.each_context(request),
            "title": "Approve with edited arguments",
            "opts": self.opts,
            "approval": approval,
            "request_shown": request_text(approval.prepared_request),
            "form": form,
        }
        return TemplateResponse(request, "admin/agents/approval/edit.html", context)

    def _selected(self, request, queryset) -> QuerySet[Approval]:
        """The ticked rows, including any the list's status filter no longer shows (decided
        since the page was drawn), so those get a message instead of silence."""
        if request.POST.get("select_across") == "1":
            return queryset
        ids = [v for v in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME) if v.isdigit()]
        return self.get_queryset(request).filter(pk__in=ids)

    @admin.action(description="Approve selected tool calls", permissions=["decide"])
    def approve_selected(self, request, queryset) -> None:
        self._decide(request, self._selected(request, queryset), approved=True, reason="")

    @admin.action(description="Reject selected tool calls…", permissions=["decide"])
    def reject_selected(self, request, queryset):
        approvals = self._selected(request, queryset)
        form = RejectForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            self._decide(request, approvals, approved=False, reason=form.cleaned_data["reason"])
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Reject tool calls",
            "opts": self.opts,
            "approvals": list(approvals.select_related("run")),
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "select_across": request.POST.get("select_across", "0"),
        }
        return TemplateResponse(request, "admin/agents/approval/reject.html", context)

    def _decide(self, request, approvals: QuerySet[Approval], *, approved: bool, reason: str):
        decided, run_ids = 0, set()
        for approval in approvals.select_related("tenant").order_by("pk"):
            try:
                approval_decide(
                    tenant=approval.tenant,
                    approval=approval,
                    approved=approved,
                    by=request.user,
                    reason=reason,
                )
            except PermissionDenied as exc:  # the agent's approval authority
                self.message_user(
                    request,
                    f"Tool call #{approval.pk} ({approval.tool_name}): {exc}",
                    messages.WARNING,
                )
                continue
            except ValidationError as exc:
                self.message_user(
                    request,
                    f"Tool call #{approval.pk} ({approval.tool_name}): {' '.join(exc.messages)}",
                    messages.WARNING,
                )
            else:
                decided += 1
                run_ids.add(approval.run_id)
        if not decided:
            return
        verb = "Approved" if approved else "Rejected"
        resumed = sorted(
            Run.objects.filter(pk__in=run_ids, status=RunStatus.QUEUED).values_list("pk", flat=True)
        )
        note = f" Run(s) {', '.join(map(str, resumed))} queued to resume." if resumed else ""
        self.message_user(request, f"{verb} {decided} tool call(s).{note}", messages.SUCCESS)


# -- facts and conversations ---------------------------------------------------------
@admin.register(Fact)
class FactAdmin(TenantScopedAdmin):
    """The shared facts (agent, tenant and API-key scope), to read and forget: a person's
    own are theirs to govern (their memory page, REST); edits go through REST or the page,
    where they are embedded again and audited. Forgetting here is audited too."""

    list_display = ["short_text", "scope", "agent", "api_key", "expires_at", "created_at"]
    list_filter = ["scope", "agent"]
    list_select_related = ["agent", "api_key"]
    search_fields = ["text"]
    fields = ["tenant", "scope", "agent", "api_key", "text", "source_run", "created_at"]
    fields += ["expires_at", "edited_by", "edited_at"]
    readonly_fields = fields

    @admin.display(description="Fact")
    def short_text(self, obj: Fact) -> str:
        return _shorten(obj.text, 100)

    def get_queryset(self, request):
        return super().get_queryset(request).exclude(scope=FactScope.PERSON)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def delete_model(self, request, obj: Fact) -> None:
        if not self._may(request, obj):
            raise PermissionDenied
        memory.facts_forget(facts=[obj], actor=request.user)

    def delete_queryset(self, request, queryset) -> None:
        ids = self._tenant_ids(request)
        if ids is not None:
            queryset = queryset.filter(tenant_id__in=ids)
        memory.facts_forget(facts=list(queryset), actor=request.user)


class MessageInline(TenantScopedInline):
    model = Message
    fields = ["role", "content", "run", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ConversationForm(TenantScopedForm):
    class Meta:
        model = Conversation
        fields = ["tenant", "title"]


class QuotaForm(TenantScopedForm):
    class Meta:
        model = Quota
        fields = ["tenant", "scope", "user", "api_key", "agent", "metric", "period", "limit"]
        fields += ["active"]


@admin.register(Quota)
class QuotaAdmin(TenantScopedAdmin):
    """Quotas and budgets (docs/quotas.md): validated by Quota.clean as on the Quotas page
    and in the API; a change applies to the next model call."""

    list_display = ["__str__", "metric", "period", "limit", "active", "used_now"]
    list_filter = ["scope", "metric", "period", "active"]
    list_select_related = ["tenant", "user", "api_key", "agent"]
    form = QuotaForm

    @admin.display(description="Used this period")
    def used_now(self, obj: Quota) -> str:
        used = quotas.used(obj)
        return f"${used:.2f}" if obj.metric == "cost" else f"{used:,} tokens"


@admin.register(Conversation)
class ConversationAdmin(TenantScopedAdmin):
    """Conversations start in the chat and the API; here they are read, renamed or deleted."""

    form = ConversationForm
    list_display = ["__str__", "agent", "owner_user", "updated_at"]
    list_filter = ["agent"]
    list_select_related = ["agent", "owner_user"]
    search_fields = ["title"]
    fields = ["tenant", "title", "agent", "owner_user", "owner_api_key", "created_at", "updated_at"]
    readonly_fields = ["agent", "owner_user", "owner_api_key", "created_at", "updated_at"]
    inlines = [MessageInline]

    def has_add_permission(self, request) -> bool:
        return False


class RecordedToolTestAdmin(ToolDefinitionAdmin):
    """The tool admin with its Test page calling tools as recorded runs (via: admin), as
    the config pages, REST and MCP do: an approval-gated tool waits in the inbox."""

    def run_test(
        self, request: HttpRequest, tenant: Tenant, name: str, arguments: Any
    ) -> dict[str, Any]:
        outcome = tool_run(
            tenant=tenant, name=name, arguments=arguments, user=request.user, via="admin"
        )
        approval = Approval.objects.filter(run_id=outcome.run_id, call_id=outcome.call_id).first()
        return {
            **asdict(outcome),
            "run_url": reverse("admin:agents_run_change", args=[outcome.run_id]),
            "approval_url": (
                reverse("admin:agents_approval_change", args=[approval.pk]) if approval else ""
            ),
            "approvals_url": reverse("admin:agents_approval_changelist") + "?status__exact=pending",
        }


admin.site.unregister(ToolDefinition)
admin.site.register(ToolDefinition, RecordedToolTestAdmin)

# (importing them registers the crew, trigger and workflow admins)
from agents import crew_admin, trigger_admin, workflow_admin  # noqa: E402, F401
