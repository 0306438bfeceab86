"""An agent's or crew's drafts: changes awaiting its required evaluation
(agents/publishing.py; docs/evaluations.md). A change is proposed by saving the agent or crew
(`PATCH /agents/{slug}`, `PATCH /crews/{slug}`) or restoring one of its versions; here the
drafts are read (READ_CONFIG), published by an override (OVERRIDE_EVALUATION, with a reason)
or discarded (CHANGE_CONFIG). The same views serve both: `crews/...` routes set `crew`."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import PARSERS, StrictSerializer, path_id, path_text
from agentplatform.api.schema import ERRORS
from agentplatform.api.serializers import DraftSerializer, draft_shown
from agentplatform.api.tenant import TenantPolicyView
from agents import publishing, selectors
from agents.models import Agent, AgentDraft, Crew
from tenancy.policy import Action

DRAFT_EXAMPLE = {
    "id": 4, "status": "failed", "changes": {"instructions": ["Be brief.", "Be chatty."]},
    "evaluation": 9, "score": 0.5, "threshold": 0.9, "live_score": 1.0, "note": "",
    "proposed_by": "alice", "decided_by": "", "reason": "", "published_version": None,
    "created_at": "2026-01-01T12:00:00Z", "decided_at": "2026-01-01T12:02:00Z",
}  # fmt: skip
SLUG = OpenApiParameter("slug", str, OpenApiParameter.PATH)
DRAFT_ID = OpenApiParameter("draft_id", int, OpenApiParameter.PATH)


class PublishSerializer(StrictSerializer):
    override = serializers.BooleanField(
        help_text="Must be true: a draft that passes is published by its evaluation; this "
        "publishes one that did not (failed, unevaluated or still evaluating)."
    )
    reason = serializers.CharField(max_length=publishing.MAX_REASON, allow_blank=True)


class DiscardSerializer(StrictSerializer):
    reason = serializers.CharField(
        max_length=publishing.MAX_REASON, allow_blank=True, required=False, default=""
    )


class DraftsView(TenantPolicyView, GenericAPIView):
    read_action = Action.READ_CONFIG
    write_action = Action.CHANGE_CONFIG
    parser_classes = PARSERS
    serializer_class = DraftSerializer
    crew = False  # the crews' routes: a crew's drafts

    def agent(self, slug: str) -> Agent | Crew:
        if self.crew:
            return selectors.crew_configured(tenant=self.tenant, slug=path_text(slug))
        return selectors.agent_configured(tenant=self.tenant, slug=path_text(slug))

    def draft(self, agent: Agent | Crew, draft_id: str) -> AgentDraft:
        return publishing.agent_draft_get(
            tenant=self.tenant, agent=agent, draft_id=path_id(draft_id, "draft")
        )

    def body(self, serializer_class) -> dict[str, Any]:
        body = serializer_class(data=self.request.data)
        body.is_valid(raise_exception=True)
        return dict(body.validated_data)


class DraftList(DraftsView):
    @extend_schema(
        summary="An agent's drafts",
        description="Newest first (the last 50): each with its evaluation's score beside "
        "the live version's last score, and the decision taken.",
        parameters=[SLUG],
        responses={200: DraftSerializer(many=True), **ERRORS},
        examples=[OpenApiExample("Drafts", [DRAFT_EXAMPLE], response_only=True)],
    )
    def get(self, request: Request, slug: str) -> Response:
        agent = self.agent(slug)
        drafts = publishing.agent_drafts(tenant=self.tenant, agent=agent)
        return Response([draft_shown(agent, draft) for draft in drafts])


class DraftDetail(DraftsView):
    @extend_schema(
        summary="One of an agent's drafts",
        parameters=[SLUG, DRAFT_ID],
        responses={200: DraftSerializer, **ERRORS},
        examples=[OpenApiExample("A draft", DRAFT_EXAMPLE, response_only=True)],
    )
    def get(self, request: Request, slug: str, draft_id: str) -> Response:
        agent = self.agent(slug)
        return Response(draft_shown(agent, self.draft(agent, draft_id)))


class DraftPublish(DraftsView):
    write_action = Action.OVERRIDE_EVALUATION

    @extend_schema(
        summary="Publish a draft by override",
        description="An admin publishes a pending draft that has not passed its evaluation "
        "(its evaluation is cancelled if still running); the reason is in the audit log.",
        parameters=[SLUG, DRAFT_ID],
        request=PublishSerializer,
        responses={200: DraftSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Override",
                {"override": True, "reason": "The failing case is outdated."},
                request_only=True,
            ),
            OpenApiExample(
                "Published", {**DRAFT_EXAMPLE, "status": "published"}, response_only=True
            ),
        ],
    )
    def post(self, request: Request, slug: str, draft_id: str) -> Response:
        agent = self.agent(slug)
        draft = self.draft(agent, draft_id)
        data = self.body(PublishSerializer)
        if not data["override"]:
            raise serializers.ValidationError(
                {"override": ["A draft is published by passing its evaluation; set override."]}
            )
        draft = publishing.draft_publish(
            tenant=self.tenant, draft=draft, by=self.principal, reason=data["reason"]
        )
        return Response(draft_shown(agent, draft))


class DraftDiscard(DraftsView):
    @extend_schema(
        summary="Discard a draft",
        description="The live agent is unchanged; the draft's evaluation is cancelled.",
        parameters=[SLUG, DRAFT_ID],
        request=DiscardSerializer,
        responses={200: DraftSerializer, **ERRORS},
        examples=[
            OpenApiExample("Discard", {"reason": "Not needed."}, request_only=True),
            OpenApiExample(
                "Discarded", {**DRAFT_EXAMPLE, "status": "discarded"}, response_only=True
            ),
        ],
    )
    def post(self, request: Request, slug: str, draft_id: str) -> Response:
        agent = self.agent(slug)
        draft = self.draft(agent, draft_id)
        data = self.body(DiscardSerializer)
        draft = publishing.draft_discard(
            tenant=self.tenant, draft=draft, by=self.principal, reason=data["reason"]
        )
        return Response(draft_shown(agent, draft))
