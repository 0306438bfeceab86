"""The caller's own conversations: their messages, branches, edits, forks, search and
summaries (agents.conversations; attachments: attachments_api.py)."""

from __future__ import annotations

from django.db import models
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.errors import Conflict
from agentplatform.api.resources import (
    ID,
    NOT_FOUND_EXAMPLE,
    OldestFirst,
    TenantViewSet,
    path_id,
    query_int,
    query_text,
)
from agentplatform.api.runs import RunSerializer
from agentplatform.api.schema import ERRORS, error
from agentplatform.api.serializers import (
    BranchSerializer,
    BranchSwitchSerializer,
    ConversationSerializer,
    ConversationSummarySerializer,
    ForkSerializer,
    MessageEditSerializer,
    MessageHitSerializer,
    MessageSerializer,
)
from agentplatform.api.tenant import request_user_or_key
from agents import conversations, runs, selectors
from agents.models import Conversation
from agents.services import conversation_delete
from tenancy.models import ApiKey
from tenancy.policy import Action

CONVERSATION_RESPONSE = {
    "id": 42,
    "agent": "support",
    "crew": None,
    "title": "Where is my order?",
    "leaf": 8,
    "created_at": "2025-01-01T12:00:00Z",
    "updated_at": "2025-01-01T12:05:00Z",
}


@extend_schema_view(
    list=extend_schema(
        summary="List my conversations",
        parameters=[
            OpenApiParameter("agent", OpenApiTypes.STR, description="Agent slug."),
            OpenApiParameter("crew", OpenApiTypes.STR, description="Crew slug."),
        ],
        responses={200: ConversationSerializer(many=True), **ERRORS},
        examples=[OpenApiExample("A conversation", CONVERSATION_RESPONSE, response_only=True)],
    ),
    create=extend_schema(
        summary="Start a conversation",
        description="Runs (`POST /runs` with `conversation`) add its messages.",
        request=ConversationSerializer,
        responses={201: ConversationSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "With an agent", {"agent": "support", "title": "Orders"}, request_only=True
            ),
            OpenApiExample("A conversation", CONVERSATION_RESPONSE, response_only=True),
        ],
    ),
    retrieve=extend_schema(
        summary="Get one of my conversations",
        parameters=[ID],
        responses={200: ConversationSerializer, **ERRORS},
        examples=[OpenApiExample("A conversation", CONVERSATION_RESPONSE, response_only=True)],
    ),
    destroy=extend_schema(
        summary="Delete one of my conversations, its messages and its attachments",
        parameters=[ID],
        responses={204: None, **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    ),
)
class ConversationViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantViewSet,
):
    """The caller's own conversations: a session user's, or an API key's."""

    serializer_class = ConversationSerializer
    read_action = Action.READ_DATA
    write_action = Action.WRITE_DATA
    action_policy = {"edit": Action.START_RUN}

    def owner_filter(self) -> dict[str, object]:
        who = self.actor
        if isinstance(who, ApiKey):
            return {"owner_api_key": who}
        return {"owner_user": who}

    def get_queryset(self) -> models.QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return Conversation.objects.none()
        if self.action != "list":
            return selectors.conversations_of(tenant=self.tenant, owner=self.actor)
        return selectors.conversations_of(
            tenant=self.tenant,
            owner=self.actor,
            agent_slug=query_text(self.request, "agent"),
            crew_slug=query_text(self.request, "crew"),
        )

    def get_object(self) -> Conversation:
        conversation_id = path_id(self.kwargs["pk"], "conversation")
        return selectors.conversation_of(
            tenant=self.tenant, owner=self.actor, conversation_id=conversation_id
        )

    def perform_create(self, serializer) -> None:
        serializer.save(tenant=self.tenant, **self.owner_filter())

    def perform_destroy(self, instance: Conversation) -> None:
        conversation_delete(tenant=self.tenant, conversation=instance)

    @extend_schema(
        summary="List a conversation's messages (oldest first)",
        description="Read-only: runs write the messages. Every branch's messages, each with "
        "the message it follows (`parent`); with `tip`, only the branch ending there (the "
        "branch shown: `tip` = the conversation's `leaf`).",
        parameters=[
            ID,
            OpenApiParameter(
                "tip", OpenApiTypes.INT, description="Only the branch ending with this message."
            ),
        ],
        responses={200: MessageSerializer(many=True), **ERRORS},
        examples=[
            OpenApiExample(
                "A message",
                {
                    "id": 7,
                    "parent": 6,
                    "role": "assistant",
                    "content": "Your order ships tomorrow.",
                    "tool_calls": [],
                    "run": 12,
                    "created_at": "2025-01-01T12:05:00Z",
                },
                response_only=True,
            )
        ],
    )
    @action(detail=True, methods=["get"], pagination_class=OldestFirst)
    def messages(self, request: Request, pk: str) -> Response:
        conversation = self.get_object()
        tip = query_int(request, "tip")
        if tip is None:
            messages = selectors.conversation_messages(
                tenant=self.tenant, conversation=conversation
            )
        else:
            messages = conversations.branch_messages(conversation=conversation, tip_id=tip)
        page = self.paginate_queryset(messages)
        return self.get_paginated_response(MessageSerializer(page, many=True).data)

    @extend_schema(
        summary="Edit one of my messages and answer it anew",
        description="A new version of one of your messages: the conversation goes on from "
        "it on a new branch (the new message becomes its leaf) and a run answers it, as "
        "`POST /runs` does. The earlier version and what followed it stay, a branch away "
        "(`GET .../branches`, `POST .../switch`). An answer cannot be edited (400); while "
        "an answer of the conversation runs, 409.",
        parameters=[ID],
        request=MessageEditSerializer,
        responses={
            201: RunSerializer,
            409: error("An answer of this conversation is still running."),
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "New text", {"message": 6, "input": "Where is order 42?"}, request_only=True
            )
        ],
    )
    @action(detail=True, methods=["post"])
    def edit(self, request: Request, pk: str) -> Response:
        conversation = self.get_object()
        body = MessageEditSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        message = conversations.conversation_message(
            conversation=conversation, message_id=body.validated_data["message"]
        )
        try:
            run = runs.run_edit(
                tenant=self.tenant,
                conversation=conversation,
                message=message,
                input=body.validated_data["input"],
                initiated_by=request_user_or_key(request),
            )
        except runs.ConversationBusy as busy:
            raise Conflict(
                f"The conversation's previous answer (run {busy.run_id}) is still running: "
                "wait for it to finish, or cancel it, then edit.",
                code="conversation_busy",
            ) from None
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Fork a conversation from one of its messages",
        description="A new conversation of yours, with the same agent or crew, holding the "
        "branch up to that message (copies); this one stays as it is.",
        parameters=[ID],
        request=ForkSerializer,
        responses={201: ConversationSerializer, **ERRORS},
        examples=[
            OpenApiExample("From a message", {"message": 7}, request_only=True),
            OpenApiExample("The fork", CONVERSATION_RESPONSE, response_only=True),
        ],
    )
    @action(detail=True, methods=["post"])
    def fork(self, request: Request, pk: str) -> Response:
        conversation = self.get_object()
        body = ForkSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        message = conversations.conversation_message(
            conversation=conversation, message_id=body.validated_data["message"]
        )
        forked = conversations.conversation_fork(
            tenant=self.tenant,
            conversation=conversation,
            message=message,
            title=body.validated_data["title"],
        )
        return Response(ConversationSerializer(forked).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="List a conversation's branches",
        description="Each branch as its last message, oldest first; `current` is the one "
        "shown and continued (its `tip` is the conversation's `leaf`).",
        parameters=[ID],
        responses={200: BranchSerializer(many=True), **ERRORS},
        examples=[
            OpenApiExample(
                "Two branches",
                [
                    {
                        "tip": 8,
                        "role": "assistant",
                        "preview": "May is lovely.",
                        "current": False,
                        "created_at": "2025-01-01T12:05:00Z",
                    },
                    {
                        "tip": 11,
                        "role": "assistant",
                        "preview": "Porto, then.",
                        "current": True,
                        "created_at": "2025-01-01T12:09:00Z",
                    },
                ],
                response_only=True,
            )
        ],
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def branches(self, request: Request, pk: str) -> Response:
        conversation = self.get_object()
        tips = conversations.branch_versions(conversation=conversation)
        return Response(BranchSerializer(tips, many=True).data)

    @extend_schema(
        summary="Switch the branch a conversation shows and continues",
        description="The newest message under the given one becomes the conversation's "
        "leaf: the next turn follows it.",
        parameters=[ID],
        request=BranchSwitchSerializer,
        responses={200: ConversationSerializer, **ERRORS},
        examples=[OpenApiExample("To a version", {"message": 9}, request_only=True)],
    )
    @action(detail=True, methods=["post"])
    def switch(self, request: Request, pk: str) -> Response:
        conversation = self.get_object()
        body = BranchSwitchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        message = conversations.conversation_message(
            conversation=conversation, message_id=body.validated_data["message"]
        )
        conversation = conversations.branch_switch(conversation=conversation, message=message)
        return Response(ConversationSerializer(conversation).data)

    @extend_schema(
        summary="Search my conversations' messages",
        description="Full text over the words of your own conversations' messages "
        '(web-search syntax: words, "a phrase", -word, or), best first, each with a '
        "snippet in which the words found are marked.",
        parameters=[
            OpenApiParameter("q", OpenApiTypes.STR, required=True, description="Words."),
            OpenApiParameter("limit", OpenApiTypes.INT, description="At most (1-100; 20)."),
        ],
        responses={200: MessageHitSerializer(many=True), **ERRORS},
        examples=[
            OpenApiExample(
                "A hit",
                [
                    {
                        "message": 7,
                        "conversation": 42,
                        "conversation_title": "Where is my order?",
                        "role": "assistant",
                        "created_at": "2025-01-01T12:05:00Z",
                        "rank": 0.1,
                        "snippet": "Your <mark>order</mark> ships tomorrow.",
                    }
                ],
                response_only=True,
            )
        ],
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def search(self, request: Request) -> Response:
        words = query_text(request, "q", max_length=200)
        if words is None or not words.strip():
            raise ValidationError({"q": ["Give words to search for."]})
        limit = query_int(request, "limit")
        limit = 20 if limit is None else limit
        if not 1 <= limit <= 100:
            raise ValidationError({"limit": ["From 1 to 100."]})
        hits = conversations.message_search(
            tenant=self.tenant, owner=self.actor, query=words, limit=limit
        )
        return Response(MessageHitSerializer(hits, many=True).data)

    @extend_schema(
        summary="List the summaries of a conversation's older turns (oldest first)",
        description="Read-only: a run whose history exceeds its agent's compaction threshold "
        'makes one (docs/agents.md, "Long conversations"); later runs reuse it.',
        parameters=[ID],
        responses={200: ConversationSummarySerializer(many=True), **ERRORS},
        examples=[
            OpenApiExample(
                "A summary",
                {
                    "id": 2,
                    "last_message": 40,
                    "previous": 1,
                    "text": "The user is planning a trip to Lisbon in May ...",
                    "messages_covered": 36,
                    "tokens_covered": 9200,
                    "model": "main/gpt-4o-mini",
                    "run": 57,
                    "call": 58,
                    "created_at": "2025-01-01T12:05:00Z",
                },
                response_only=True,
            )
        ],
    )
    @action(detail=True, methods=["get"], pagination_class=OldestFirst)
    def summaries(self, request: Request, pk: str) -> Response:
        conversation = self.get_object()
        found = selectors.conversation_summaries(tenant=self.tenant, conversation=conversation)
        page = self.paginate_queryset(found)
        return self.get_paginated_response(ConversationSummarySerializer(page, many=True).data)
