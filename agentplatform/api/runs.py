"""Runs over REST: start (optionally streaming), list, read, follow events, cancel, decide
approvals. Each handler authenticates, validates, calls one service of `agents.runs`.

The access policy decides: reading a run needs `READ_RUN` and shows only the runs the
caller may see (`agents.access.visible_runs`); starting, cancelling and deciding are asked
of the services, which refuse what the caller may not do.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import Http404
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import exceptions, serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.errors import Conflict
from agentplatform.api.resources import (
    PARSERS,
    JSONObjectField,
    NewestFirstChecked,
    StrictSerializer,
    path_id,
    query_bool,
    query_int,
)
from agentplatform.api.schema import ERRORS, error
from agentplatform.api.serializers import PreparedRequestSerializer
from agentplatform.api.sse import EventStreamNegotiation, resume_after, run_event_stream
from agentplatform.api.tenant import (
    TenantPolicyView,
    request_user_or_key,
)
from agentplatform.event_streams import event_stream_response
from agents import access
from agents.models import (
    MAX_INPUT_CHARS,
    Agent,
    Approval,
    ApprovalStatus,
    Crew,
    Run,
    RunEvent,
    Verdict,
    Verification,
    WorkflowDefinition,
)
from agents.runs import (
    ConversationBusy,
    IdempotencyKeyReused,
    RunNotResumable,
    approval_decide,
    run_cancel,
    run_resume,
    run_start,
    workflow_start,
)
from agents.runtime.spec import RunStatus
from agents.selectors import (
    agent_get,
    approval_get,
    conversation_get,
    crew_get,
    run_approvals,
    run_events_after,
    run_is_visible,
    run_shown,
    run_with_key,
    runs_visible,
    workflow_named,
)
from agents.verification import verify
from tenancy.policy import Action

MAX_IDEMPOTENCY_KEY = 200
EVENTS_PAGE = 500
MAX_EVENTS_PAGE = 1000
MAX_APPROVAL_NESTING = 5  # crews nest a few levels at most


# -- schemas ---------------------------------------------------------------------------
class ApprovalSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="run_id", read_only=True)
    decided_by = serializers.CharField(source="decided_by_label", read_only=True)
    prepared_request = PreparedRequestSerializer(
        read_only=True,
        allow_null=True,
        help_text=(
            "For a tool that sends one HTTP request per call: the exact request approving "
            "sends, credential masked. Null for other tools."
        ),
    )
    replaced_by = serializers.IntegerField(
        source="replaced_by_id",
        read_only=True,
        allow_null=True,
        help_text=(
            "Status `edited`: approved with edited arguments, so the request was prepared "
            "again and asked again as this approval."
        ),
    )

    class Meta:
        model = Approval
        fields = [
            "id",
            "run",
            "call_id",
            "tool_name",
            "arguments",
            "status",
            "decided_by",
            "decided_at",
            "reason",
            "edited_arguments",
            "prepared_request",
            "replaced_by",
            "created_at",
        ]
        read_only_fields = fields


class EvidenceSerializer(serializers.Serializer):
    call_id = serializers.CharField()
    tool = serializers.CharField()
    arguments = serializers.JSONField()
    result = serializers.CharField(help_text="The result the model read (2,000 chars at most).")
    is_error = serializers.BooleanField()
    truncated = serializers.BooleanField(required=False)


class ClaimSerializer(serializers.Serializer):
    text = serializers.CharField(help_text="What the agent says it did or answered.")
    evidence = EvidenceSerializer(many=True, help_text="The tool results it used (the latest 20).")


class VerificationSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="run_id", read_only=True)
    by = serializers.CharField(source="by_label", read_only=True)

    class Meta:
        model = Verification
        fields = ["id", "run", "verdict", "source", "by", "note", "created_at"]
        read_only_fields = fields


class UsageSerializer(serializers.Serializer):
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cache_read_tokens = serializers.IntegerField()
    cache_write_tokens = serializers.IntegerField()


class RunAttachmentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    kind = serializers.CharField(help_text="`image` or `document`.")
    media_type = serializers.CharField()
    size = serializers.IntegerField()
    status = serializers.CharField(
        help_text="`ready`, `reading` (a worker still reads the document) or `failed`."
    )


class RunSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    crew = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    workflow = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        help_text="The workflow it ran (its steps are its `workflow.step.*` events); null "
        "for an agent's, a crew's or a tool's run.",
    )
    usage = serializers.SerializerMethodField()
    approvals = serializers.SerializerMethodField()
    claim = ClaimSerializer(
        read_only=True,
        allow_null=True,
        help_text="A succeeded run's outcome claim: its answer and the evidence it rests on. "
        "Null for other runs. Succeeded does not mean verified: see `verifications`.",
    )
    verifications = VerificationSerializer(
        many=True, read_only=True, help_text="Verdicts on the claim, oldest first."
    )
    cost_usd = serializers.DecimalField(
        max_digits=14, decimal_places=6, read_only=True,
        help_text="US dollars this run's own model calls cost, from the tenant's prices "
        "(GET /api/v1/prices); 0 for a model without a price.",
    )  # fmt: skip
    trigger = serializers.PrimaryKeyRelatedField(
        read_only=True,
        allow_null=True,
        help_text="The schedule or webhook trigger that started it (GET /api/v1/triggers/{id}); "
        "null for a run someone started.",
    )
    total_cost_usd = serializers.DecimalField(
        max_digits=14, decimal_places=6, read_only=True,
        help_text="With its child runs' (a crew's members); equal to cost_usd otherwise.",
    )  # fmt: skip
    in_reply_to = serializers.PrimaryKeyRelatedField(
        read_only=True,
        allow_null=True,
        help_text="The conversation's message it answered: the tip of the branch it "
        "continued (GET /api/v1/conversations/{id}/messages?tip=); null outside one.",
    )
    attachments = RunAttachmentSerializer(
        many=True,
        read_only=True,
        help_text="The files it was given: its message's, and its conversation's earlier "
        "documents (GET /conversations/{id}/attachments/{id}).",
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "status",
            "agent",
            "crew",
            "workflow",
            "tool_name",
            "parent",
            "conversation",
            "in_reply_to",
            "input",
            "output",
            "structured_output",
            "error",
            "provider",
            "model",
            "usage",
            "cost_usd",
            "total_cost_usd",
            "approvals",
            "claim",
            "verifications",
            "limits",
            "correlation_id",
            "idempotency_key",
            "instructions_digest",
            "tools_digest",
            "config_versions",
            "trigger",
            "attachments",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    @extend_schema_field(UsageSerializer)
    def get_usage(self, run: Run) -> dict[str, int]:
        return {
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "cache_read_tokens": run.cache_read_tokens,
            "cache_write_tokens": run.cache_write_tokens,
        }

    @extend_schema_field(ApprovalSerializer(many=True))
    def get_approvals(self, run: Run) -> list[dict[str, Any]]:
        """The run's approvals and its child runs' (a crew surfaces its members'); decide
        any of them at this run's approvals URL."""
        return ApprovalSerializer(run_approvals(run), many=True).data


def _no_nul(value: str) -> None:
    if "\x00" in value:
        raise serializers.ValidationError("Text may not contain NUL characters.")


SLUG = r"^[a-z0-9][a-z0-9_-]{0,49}$"


class RunCreateSerializer(StrictSerializer):
    agent = serializers.RegexField(SLUG, required=False, help_text="Slug of the agent to run.")
    crew = serializers.RegexField(SLUG, required=False, help_text="Slug of the crew to run.")
    workflow = serializers.RegexField(
        SLUG, required=False, help_text="Slug of the workflow to run (with `arguments`)."
    )
    input = serializers.CharField(
        max_length=MAX_INPUT_CHARS, trim_whitespace=False, validators=[_no_nul], required=False,
        help_text="An agent's or crew's input (required for them).",
    )  # fmt: skip
    arguments = JSONObjectField(
        required=False,
        help_text="A workflow's input: an object its input schema accepts (docs/workflows.md).",
    )
    conversation = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=2**63 - 1,
        help_text="Id of one of the tenant's conversations: the run continues it.",
    )
    stream = serializers.BooleanField(
        default=False, help_text="Answer with the run's event stream (SSE) instead of JSON."
    )
    attachments = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        required=False,
        default=list,
        max_length=100,
        help_text="Ids of files attached in `conversation` and not sent yet "
        "(POST /conversations/{id}/attachments): they are sent with this message.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        targets = [name for name in ("agent", "crew", "workflow") if attrs.get(name)]
        if len(targets) != 1:
            raise serializers.ValidationError(
                {"agent": ["Give exactly one agent, crew or workflow."]}
            )
        if targets == ["workflow"]:
            if "arguments" not in attrs or attrs.get("input") is not None:
                raise serializers.ValidationError(
                    {"arguments": ["A workflow takes `arguments` (an object), not `input`."]}
                )
            if attrs.get("conversation") is not None or attrs.get("attachments"):
                raise serializers.ValidationError(
                    {"workflow": ["A workflow runs outside conversations: no files either."]}
                )
        elif attrs.get("input") is None or "arguments" in attrs:
            raise serializers.ValidationError(
                {"input": ["An agent or crew takes `input` (text), not `arguments`."]}
            )
        return attrs


class ApprovalDecisionSerializer(StrictSerializer):
    decision = serializers.ChoiceField(choices=["approve", "reject"])
    reason = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=2000, validators=[_no_nul]
    )
    arguments = JSONObjectField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Approve with edited arguments (a JSON object); ignored when rejecting.",
    )


class VerifySerializer(StrictSerializer):
    verdict = serializers.ChoiceField(choices=Verdict.choices)
    note = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=2000, validators=[_no_nul]
    )


class RunEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunEvent
        fields = ["seq", "type", "payload", "created_at"]
        read_only_fields = fields


RunEventsPage = inline_serializer(
    name="RunEventsPage",
    fields={
        "run": serializers.IntegerField(),
        "status": serializers.CharField(),
        "events": RunEventSerializer(many=True),
        "has_more": serializers.BooleanField(),
        "next_after": serializers.IntegerField(
            help_text="Pass as `?after=` for the next page (the last seq returned)."
        ),
    },
)

SSE_DESCRIPTION = (
    "With `Accept: text/event-stream`: one SSE message per event (`id:` the event's seq, "
    "`event:` its type, `data:` its JSON payload), `: heartbeat` comments while the run is "
    "quiet; the stream ends after the terminal event (run.completed, run.failed, "
    "run.cancelled). Resume with `Last-Event-ID`."
)
# Errors are JSON even where a view may also answer with an event stream.
JSON_ERRORS = {(code, "application/json"): response for code, response in ERRORS.items()}
SSE_RESPONSE = OpenApiResponse(OpenApiTypes.STR, description=SSE_DESCRIPTION)
SSE_EXAMPLE = (
    'retry: 3000\n\nid: 1\nevent: run.started\ndata: {"model":"gpt-4o","agent":'
    '"assistant"}\n\nid: 2\nevent: text.delta\ndata: {"text":"Hello"}\n\n'
)
RUN_EXAMPLE = {
    "id": 42,
    "status": "queued",
    "agent": "assistant",
    "crew": None,
    "parent": None,
    "conversation": None,
    "input": "What is 6*7?",
    "output": "",
    "structured_output": None,
    "error": "",
    "provider": "",
    "model": "",
    "usage": {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    },
    "cost_usd": "0.000000",
    "total_cost_usd": "0.000000",
    "approvals": [],
    "claim": None,
    "verifications": [],
    "limits": {},
    "correlation_id": "5f0c6a1f9e6d4d2b8f3a7c1e2d4b6a8c",
    "idempotency_key": "order-1234",
    "instructions_digest": "",
    "tools_digest": "",
    "config_versions": {},
    "trigger": None,
    "attachments": [],
    "created_at": "2026-01-01T12:00:00Z",
    "started_at": None,
    "finished_at": None,
}

FINISHED_EXAMPLE = {
    **RUN_EXAMPLE,
    "status": "succeeded",
    "output": "6*7 is 42.",
    "provider": "openai",
    "model": "gpt-4o",
    "usage": {
        "input_tokens": 120,
        "output_tokens": 12,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    },
    "cost_usd": "0.000420",
    "total_cost_usd": "0.000420",
    "started_at": "2026-01-01T12:00:01Z",
    "finished_at": "2026-01-01T12:00:03Z",
}


# -- views -----------------------------------------------------------------------------
class RunView(TenantPolicyView, GenericAPIView):
    """Shared setup: tenant, policy (`read_action` to read, `write_action` to act), safe
    parsers; runs the caller may not see answer 404."""

    read_action = Action.READ_RUN
    write_action = Action.START_RUN
    parser_classes = PARSERS
    serializer_class = RunSerializer

    def get_run(self, run_id: str) -> Run:
        return access.visible_run(self.principal, path_id(run_id, "run"))

    def run_data(self, run: Run) -> dict[str, Any]:
        return RunSerializer(run_shown(tenant=self.tenant, run_id=run.pk)).data

    def workflow(self, slug: str) -> WorkflowDefinition:
        found = workflow_named(tenant=self.tenant, slug=slug)
        if found is None:
            raise Http404("No such workflow.")
        return found


def _query_text(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if "\x00" in value or len(value) > 200:
        raise exceptions.ValidationError({name: ["Not a valid value."]})
    return value


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None or key.strip() == "":
        return None
    key = key.strip()
    if len(key) > MAX_IDEMPOTENCY_KEY or not key.isascii() or not key.isprintable():
        raise exceptions.ValidationError(
            {"Idempotency-Key": [f"At most {MAX_IDEMPOTENCY_KEY} printable ASCII characters."]}
        )
    return key


def _same_request(run: Run, agent: Agent | None, crew: Crew | None, data: dict) -> bool:
    if data.get("workflow"):
        same_input = run.workflow is not None and run.workflow.slug == data["workflow"]
        return same_input and json.loads(run.input or "null") == data["arguments"]
    return (
        run.agent_id == (agent.pk if agent else None)
        and run.crew_id == (crew.pk if crew else None)
        and run.input == data["input"]
        and run.conversation_id == data.get("conversation")
    )


class RunListCreate(EventStreamNegotiation, RunView):
    pagination_class = NewestFirstChecked

    def get_queryset(self) -> QuerySet[Run]:
        status_filter = _query_text(self.request, "status")
        if status_filter is not None and status_filter not in RunStatus._value2member_map_:
            choices = ", ".join(s.value for s in RunStatus)
            raise exceptions.ValidationError({"status": [f"One of: {choices}."]})
        return runs_visible(
            principal=self.principal,
            status=status_filter,
            agent_slug=_query_text(self.request, "agent"),
            crew_slug=_query_text(self.request, "crew"),
            conversation_id=query_int(self.request, "conversation"),
            parent_id=query_int(self.request, "parent"),
        )

    @extend_schema(
        summary="List runs",
        description="Newest first, cursor-paginated. Child runs of crews are included; "
        "filter with `parent`.",
        parameters=[
            OpenApiParameter("status", str, enum=[s.value for s in RunStatus]),
            OpenApiParameter("agent", str, description="Agent slug."),
            OpenApiParameter("crew", str, description="Crew slug."),
            OpenApiParameter("conversation", int, description="Conversation id."),
            OpenApiParameter("parent", int, description="Parent run id (a crew's members)."),
        ],
        responses={(200, "application/json"): RunSerializer(many=True), **JSON_ERRORS},
        examples=[
            OpenApiExample(
                "A page",
                value={"next": None, "previous": None, "results": [RUN_EXAMPLE]},
                response_only=True,
            )
        ],
    )
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(RunSerializer(page, many=True).data)

    @extend_schema(
        summary="Start a run",
        description=(
            "Queues a run of an agent or a crew; a worker executes it. With an "
            "`Idempotency-Key` header, repeating the request answers 200 with the same run "
            "and starts nothing (the same key with a different body is a 409). With "
            '`"stream": true`, `?stream=true` or `Accept: text/event-stream` the answer is '
            "the run's event stream. " + SSE_DESCRIPTION
        ),
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Any string up to 200 printable ASCII characters, per tenant.",
            ),
            OpenApiParameter("stream", bool, description="Answer with the event stream."),
        ],
        request=RunCreateSerializer,
        responses={
            (201, "application/json"): RunSerializer,
            (200, "application/json"): OpenApiResponse(
                RunSerializer, description="A replay of the Idempotency-Key: the same run."
            ),
            (201, "text/event-stream"): SSE_RESPONSE,
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR, description="A replay of the Idempotency-Key, streaming."
            ),
            (409, "application/json"): error(
                "The Idempotency-Key was used for a different request, or the conversation's "
                "previous answer is still running."
            ),
            **JSON_ERRORS,
        },
        examples=[
            OpenApiExample(
                "Run an agent",
                value={"agent": "assistant", "input": "What is 6*7?"},
                request_only=True,
            ),
            OpenApiExample(
                "Send files attached in a conversation",
                value={
                    "agent": "assistant",
                    "input": "What does the contract say about notice?",
                    "conversation": 7,
                    "attachments": [9],
                },
                request_only=True,
            ),
            OpenApiExample(
                "Run a workflow",
                value={"workflow": "order", "arguments": {"item": "widget"}},
                request_only=True,
            ),
            OpenApiExample(
                "Run a crew in a conversation, streaming",
                value={"crew": "research", "input": "Summarise", "conversation": 7, "stream": True},
                request_only=True,
            ),
            OpenApiExample("A queued run", value=RUN_EXAMPLE, response_only=True),
            OpenApiExample(
                "The stream", value=SSE_EXAMPLE, response_only=True, media_type="text/event-stream"
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        body = RunCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        tenant = self.tenant
        key = _idempotency_key(request)
        stream = data["stream"] or bool(query_bool(request, "stream"))
        stream = stream or self.wants_event_stream(request)
        agent = agent_get(tenant=tenant, slug=data["agent"]) if data.get("agent") else None
        crew = crew_get(tenant=tenant, slug=data["crew"]) if data.get("crew") else None
        conversation = None
        if data.get("conversation") is not None:
            conversation = conversation_get(tenant=tenant, conversation_id=data["conversation"])
        before = timezone.now()
        existing = None
        if key is not None:
            existing = run_with_key(tenant=tenant, idempotency_key=key)
        if existing is not None:
            mine = run_is_visible(principal=self.principal, run=existing)
            if not mine or not _same_request(existing, agent, crew, data):
                raise Conflict(
                    "This Idempotency-Key was used for a different request.",
                    code="idempotency_key_reused",
                )
            run = existing
        else:
            try:
                if data.get("workflow"):
                    run = workflow_start(
                        tenant=tenant,
                        workflow=self.workflow(data["workflow"]),
                        input=data["arguments"],
                        initiated_by=request_user_or_key(request),
                        idempotency_key=key,
                    )
                else:
                    run = run_start(
                        tenant=tenant,
                        agent=agent,
                        crew=crew,
                        input=data["input"],
                        conversation=conversation,
                        initiated_by=request_user_or_key(request),
                        idempotency_key=key,
                        attachments=data["attachments"],
                    )
            except IdempotencyKeyReused:  # taken by another principal meanwhile
                raise Conflict(
                    "This Idempotency-Key was used for a different request.",
                    code="idempotency_key_reused",
                ) from None
            except ConversationBusy as busy:
                raise Conflict(
                    f"The conversation's previous answer (run {busy.run_id}) is still "
                    "running: wait for it to finish, or cancel it, or queue the next turn "
                    "(POST /api/v1/conversations/{id}/queue).",
                    code="conversation_busy",
                ) from None
        created = existing is None and run.created_at >= before
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        location = reverse("api_run", kwargs={"run_id": run.pk})
        if stream:
            headers = {"Location": location, "X-Run-Id": str(run.pk)}
            return event_stream_response(run_event_stream(run), status=code, headers=headers)
        return Response(self.run_data(run), status=code, headers={"Location": location})


class RunDetail(RunView):
    @extend_schema(
        summary="Read a run",
        responses={200: RunSerializer, **ERRORS},
        examples=[OpenApiExample("A finished run", value=FINISHED_EXAMPLE, response_only=True)],
    )
    def get(self, request: Request, run_id: str) -> Response:
        return Response(self.run_data(self.get_run(run_id)))


class RunEvents(EventStreamNegotiation, RunView):
    @extend_schema(
        summary="A run's events (JSON page or live SSE stream)",
        description=(
            "Without `Accept: text/event-stream`: stored events after `?after=` (oldest "
            "first, at most `limit`). " + SSE_DESCRIPTION
        ),
        parameters=[
            OpenApiParameter("after", int, description="Only events with a larger seq."),
            OpenApiParameter("limit", int, description=f"At most {MAX_EVENTS_PAGE}."),
            OpenApiParameter(
                "Last-Event-ID",
                int,
                OpenApiParameter.HEADER,
                description="SSE: resume after this seq (browsers send it on reconnect).",
            ),
        ],
        responses={
            (200, "application/json"): RunEventsPage,
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR, description=SSE_DESCRIPTION
            ),
            **JSON_ERRORS,
        },
        examples=[
            OpenApiExample(
                "A page",
                value={
                    "run": 42,
                    "status": "succeeded",
                    "events": [
                        {
                            "seq": 1,
                            "type": "run.started",
                            "payload": {"model": "gpt-4o", "agent": "assistant"},
                            "created_at": "2026-01-01T12:00:00Z",
                        }
                    ],
                    "has_more": False,
                    "next_after": 1,
                },
                response_only=True,
            ),
            OpenApiExample(
                "The stream", value=SSE_EXAMPLE, response_only=True, media_type="text/event-stream"
            ),
        ],
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = self.get_run(run_id)
        after = resume_after(request)
        if self.wants_event_stream(request):
            return event_stream_response(run_event_stream(run, after))
        limit = min(query_int(request, "limit") or EVENTS_PAGE, MAX_EVENTS_PAGE)
        rows = run_events_after(run=run, after=after, limit=limit + 1)
        has_more = len(rows) > limit
        rows = rows[:limit]
        return Response(
            {
                "run": run.pk,
                "status": run.status,
                "events": RunEventSerializer(rows, many=True).data,
                "has_more": has_more,
                "next_after": rows[-1].seq if rows else after,
            }
        )


class RunCancel(RunView):
    write_action = Action.CANCEL_RUN

    @extend_schema(
        summary="Cancel a run",
        description="A queued or parked run stops at once; a running one at its next step. "
        "What it produced stays: the text so far is its `output` (and, in a conversation, "
        "the turn's answer), its tool results stay recorded; the conversation's next queued "
        "turn then starts. Cancelling a cancelled run answers it again; a finished one is a "
        "409.",
        request=None,
        responses={200: RunSerializer, 409: error("The run already finished."), **ERRORS},
        examples=[
            OpenApiExample(
                "Cancelled",
                value={**RUN_EXAMPLE, "status": "cancelled", "error": "cancelled"},
                response_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = self.get_run(run_id)
        if run.is_terminal and run.status != RunStatus.CANCELLED:
            raise Conflict(f"This run already finished ({run.status}).", code="run_finished")
        run = run_cancel(tenant=self.tenant, run=run, by=request_user_or_key(request))
        return Response(self.run_data(run))


class RunResume(RunView):
    write_action = Action.RESUME_RUN

    @extend_schema(
        summary="Resume a failed run",
        description="Once what failed the run is fixed (a provider down past its retries, a "
        "tool misconfigured, a quota refused), it goes on from its last checkpoint with its "
        "agent's configuration now, recorded on the run (`model`, `config_versions`): the "
        "tool results it recorded are reused and no write is sent again. A run that failed "
        "before its first checkpoint starts over from its input. Its events go on after the "
        "failure: `run.resumed` (who, the error it had, the configuration versions now and "
        "before), then the continuation. A crew's run reuses its members that answered and "
        "resumes its failed ones. Its starter or an admin (`resume_run`), who may still use "
        "its agent or crew; recorded in the audit log. 409: a run that did not fail (or "
        "another resume took it first), a crew member's run alone (resume its crew's run), "
        "a direct tool call, a conversation's answer while another runs or after the "
        "conversation went on.",
        request=None,
        responses={200: RunSerializer, 409: error("The run cannot be resumed."), **ERRORS},
        examples=[OpenApiExample("Resumed", value=RUN_EXAMPLE, response_only=True)],
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = self.get_run(run_id)
        try:
            run = run_resume(tenant=self.tenant, run=run, by=request_user_or_key(request))
        except RunNotResumable as exc:
            raise Conflict(" ".join(exc.messages), code="run_not_resumable") from None
        return Response(self.run_data(run))


def _belongs_to(approval: Approval, run: Run) -> bool:
    """The approval is the run's, or a descendant run's (crews surface their members')."""
    current: Run | None = approval.run
    for _ in range(MAX_APPROVAL_NESTING + 1):
        if current is None:
            return False
        if current.pk == run.pk:
            return True
        current = current.parent
    return False


class RunApprovalDecide(RunView):
    write_action = Action.DECIDE_APPROVAL

    @extend_schema(
        summary="Approve or reject a parked tool call",
        description=(
            "The approval must belong to this run or to one of its child runs (a crew's "
            "member). Approving may edit the arguments. When the run's last pending call "
            "is decided, the run resumes. Deciding twice is a 409. A call with a "
            "`prepared_request` (an HTTP tool) sends exactly that request once approved; "
            "approved with edited arguments, it sends nothing: the request is prepared again "
            "and asked again as a new pending approval (the answer has status `edited` and "
            "its id in `replaced_by`), and arguments it cannot be prepared from are a 400."
        ),
        request=ApprovalDecisionSerializer,
        responses={
            200: ApprovalSerializer,
            409: error("Already decided, or the run finished."),
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "Approve with edited arguments",
                value={"decision": "approve", "arguments": {"amount": 50, "to": "bob"}},
                request_only=True,
            ),
            OpenApiExample(
                "Reject", value={"decision": "reject", "reason": "Too risky."}, request_only=True
            ),
            OpenApiExample(
                "Approved",
                value={
                    "id": 7,
                    "run": 42,
                    "call_id": "call_1",
                    "tool_name": "transfer",
                    "arguments": {"amount": 500, "to": "bob"},
                    "status": "approved",
                    "decided_by": "API key ci",
                    "decided_at": "2026-01-01T12:01:00Z",
                    "reason": "",
                    "edited_arguments": {"amount": 50, "to": "bob"},
                    "prepared_request": None,
                    "replaced_by": None,
                    "created_at": "2026-01-01T12:00:30Z",
                },
                response_only=True,
            ),
        ],
    )
    def post(self, request: Request, run_id: str, approval_id: str) -> Response:
        run = self.get_run(run_id)
        tenant = self.tenant
        approval = approval_get(tenant=tenant, approval_id=path_id(approval_id, "approval"))
        if not _belongs_to(approval, run):
            raise Http404("No such approval in this run.")
        body = ApprovalDecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if approval.status != ApprovalStatus.PENDING:
            raise Conflict(f"This call was already {approval.status}.", code="already_decided")
        if approval.run.is_terminal:
            raise Conflict(
                f"The run already finished ({approval.run.status}).", code="run_finished"
            )
        try:
            approval = approval_decide(
                tenant=tenant,
                approval=approval,
                approved=data["decision"] == "approve",
                by=request_user_or_key(request),
                reason=data["reason"],
                arguments=data["arguments"],
            )
        except DjangoValidationError:
            approval.refresh_from_db()
            if approval.status != ApprovalStatus.PENDING:  # decided meanwhile
                raise Conflict(
                    f"This call was already {approval.status}.", code="already_decided"
                ) from None
            raise
        return Response(ApprovalSerializer(approval).data)


class RunVerify(RunView):
    write_action = Action.VERIFY_RUN

    @extend_schema(
        summary="Verify or refute a run's outcome",
        description="Records a person's verdict on a succeeded run's outcome claim (its "
        "starter's or an admin's), with an optional note. A run may collect several "
        "verdicts; the latest is its current one. A run that did not succeed is a 400.",
        request=VerifySerializer,
        responses={201: VerificationSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Refute",
                value={"verdict": "refuted", "note": "The order was never placed."},
                request_only=True,
            ),
            OpenApiExample(
                "Recorded",
                value={
                    "id": 3,
                    "run": 42,
                    "verdict": "refuted",
                    "source": "person",
                    "by": "alice",
                    "note": "The order was never placed.",
                    "created_at": "2026-01-01T12:05:00Z",
                },
                response_only=True,
            ),
        ],
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = self.get_run(run_id)
        body = VerifySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        verification = verify(
            tenant=self.tenant,
            run=run,
            verdict=body.validated_data["verdict"],
            note=body.validated_data["note"],
            by=request_user_or_key(request),
        )
        return Response(VerificationSerializer(verification).data, status=status.HTTP_201_CREATED)
