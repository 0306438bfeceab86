"""While a conversation's answer works: queue the next turn, steer the running loop, take a
queued message back (agents.runs.steering). Stopping is `POST /runs/{id}/cancel`.

Only the conversation's owner (a person, or the API key that owns it) queues and steers;
another's conversation or run answers 404. Each handler validates and calls one service.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.errors import Conflict
from agentplatform.api.resources import NOT_FOUND_EXAMPLE, PARSERS, StrictSerializer, path_id
from agentplatform.api.schema import ERRORS, error
from agentplatform.api.tenant import TenantPolicyView, request_user_or_key
from agents import access
from agents.models import MAX_INPUT_CHARS, QueuedMessage
from agents.runs import (
    ConversationBusy,
    RunFinished,
    message_queue,
    queued_messages,
    queued_remove,
    run_steer,
)
from agents.selectors import conversation_of
from tenancy.policy import Action


class QueuedMessageSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(
        source="run_id",
        read_only=True,
        allow_null=True,
        help_text="The run at work when it was sent (the one a steering message steers).",
    )
    started_run = serializers.IntegerField(
        source="started_run_id",
        read_only=True,
        allow_null=True,
        help_text="Status `started`: the run answering it.",
    )
    late = serializers.BooleanField(
        read_only=True,
        help_text="A steering message that came after the run's last round: it is the next "
        "turn instead.",
    )

    class Meta:
        model = QueuedMessage
        fields = [
            "id",
            "kind",
            "status",
            "late",
            "content",
            "error",
            "run",
            "started_run",
            "conversation",
            "created_at",
        ]
        read_only_fields = fields


def _no_nul(value: str) -> None:
    if "\x00" in value:
        raise serializers.ValidationError("Text may not contain NUL characters.")


class MessageInSerializer(StrictSerializer):
    input = serializers.CharField(
        max_length=MAX_INPUT_CHARS, trim_whitespace=False, validators=[_no_nul]
    )


QUEUED_EXAMPLE = {
    "id": 9,
    "kind": "turn",
    "status": "waiting",
    "late": False,
    "content": "And in euros?",
    "error": "",
    "run": 42,
    "started_run": None,
    "conversation": 7,
    "created_at": "2026-01-01T12:00:05Z",
}


class SteeringView(TenantPolicyView, GenericAPIView):
    read_action = Action.READ_DATA
    write_action = Action.START_RUN
    parser_classes = PARSERS
    serializer_class = QueuedMessageSerializer

    def conversation(self, conversation_id: str):
        return conversation_of(
            tenant=self.tenant,
            owner=request_user_or_key(self.request),
            conversation_id=path_id(conversation_id, "conversation"),
        )

    def text(self, request: Request) -> str:
        body = MessageInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return body.validated_data["input"]


class ConversationQueue(SteeringView):
    @extend_schema(
        summary="A conversation's queued messages",
        description="Messages waiting to start the next turn (oldest first; `refused`: it "
        "could not start, `error` says why), and steering messages its loop has not taken "
        "yet.",
        responses={200: QueuedMessageSerializer(many=True), **ERRORS},
        examples=[OpenApiExample("Waiting", value=[QUEUED_EXAMPLE], response_only=True)],
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        chat = self.conversation(conversation_id)
        rows = queued_messages(tenant=self.tenant, conversation=chat)
        return Response(QueuedMessageSerializer(rows, many=True).data)

    @extend_schema(
        summary="Queue the conversation's next turn",
        description="While its answer works, the message waits and starts the next turn "
        "when that answer ends, however it ends (answered, failed, stopped), in the order "
        "queued. With nothing at work it starts at once (`status` `started`, its run in "
        "`started_run`). Stored before the answer is sent.",
        request=MessageInSerializer,
        responses={201: QueuedMessageSerializer, **ERRORS},
        examples=[
            OpenApiExample("Queue", value={"input": "And in euros?"}, request_only=True),
            OpenApiExample("Queued", value=QUEUED_EXAMPLE, response_only=True),
        ],
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        chat = self.conversation(conversation_id)
        text = self.text(request)
        try:
            queued = message_queue(
                tenant=self.tenant, conversation=chat, text=text, by=request_user_or_key(request)
            )
        except ConversationBusy:  # another turn started at the same moment
            raise Conflict("Another turn started meanwhile: queue again.", code="busy") from None
        return Response(QueuedMessageSerializer(queued).data, status=status.HTTP_201_CREATED)


class ConversationQueuedMessage(SteeringView):
    @extend_schema(
        summary="Take back a queued message",
        description="Only one still waiting (or refused); one that started is a 409.",
        responses={204: None, 409: error("It started already."), **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    )
    def delete(self, request: Request, conversation_id: str, queued_id: str) -> Response:
        chat = self.conversation(conversation_id)
        queued_remove(
            tenant=self.tenant,
            conversation=chat,
            queued_id=path_id(queued_id, "queued message"),
            by=request_user_or_key(request),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunSteer(SteeringView):
    @extend_schema(
        summary="Steer a running run",
        description="The message joins the run's loop before its next model call, as a user "
        "turn: a `run.steered` event on its stream, and a user message of that turn in its "
        "conversation. One that arrives after the loop's last round becomes the "
        "conversation's next turn (`late`, `kind` `turn`). A finished run is a 409.",
        request=MessageInSerializer,
        responses={
            201: QueuedMessageSerializer,
            409: error("The run already finished."),
            **ERRORS,
        },
        examples=[
            OpenApiExample("Steer", value={"input": "Answer in French."}, request_only=True),
            OpenApiExample(
                "Sent",
                value={**QUEUED_EXAMPLE, "kind": "steer", "content": "Answer in French."},
                response_only=True,
            ),
        ],
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = access.visible_run(self.principal, path_id(run_id, "run"))
        text = self.text(request)
        try:
            steer = run_steer(
                tenant=self.tenant, run=run, text=text, by=request_user_or_key(request)
            )
        except RunFinished as exc:
            raise Conflict(exc.messages[0], code="run_finished") from None
        return Response(QueuedMessageSerializer(steer).data, status=status.HTTP_201_CREATED)
