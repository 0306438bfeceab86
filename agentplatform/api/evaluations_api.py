"""Datasets and their cases, evaluations, their comparison, and feedback on runs
(agents.evaluations; docs/evaluations.md). Datasets are configuration (read: viewers; write:
admins); an evaluation starts runs (START_RUN) and shows their answers, so it is seen as runs
are (READ_RUN: admins every one, others those they started); feedback is given as a verdict
is (VERIFY_RUN: the run's starter or an admin)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import (
    NOT_FOUND_EXAMPLE,
    PARSERS,
    JSONObjectField,
    NewestFirstChecked,
    OldestFirst,
    StrictSerializer,
    path_id,
    path_text,
)
from agentplatform.api.schema import ERRORS
from agentplatform.api.tenant import (
    TenantPolicyView,
    request_user_or_key,
)
from agents import access, selectors
from agents.evaluations import (
    case_delete,
    case_from_run,
    case_save,
    dataset_delete,
    dataset_get,
    dataset_save,
    evaluation_cancel,
    evaluation_compare,
    evaluation_start,
    feedback_record,
    visible_evaluation,
    visible_evaluations,
)
from agents.models import (
    Case,
    Dataset,
    Evaluation,
    EvaluationResult,
    Feedback,
    Rating,
)
from providers.selectors import connection_of
from tenancy.models import Tenant
from tenancy.policy import Action

# -- examples (the documentation's; every operation shows one) ----------------------------
DATASET_EXAMPLE = {
    "id": 3, "name": "refunds", "description": "Refund questions.", "judge_connection": None,
    "judge_model": "", "cases": 12, "created_at": "2026-01-01T12:00:00Z",
    "updated_at": "2026-01-01T12:00:00Z",
}  # fmt: skip
CASE_EXAMPLE = {
    "id": 7, "dataset": 3, "name": "annual plan", "input": "Can I get a refund on my annual plan?",
    "expect": {"contains": "30 days"}, "source_run": None, "created_at": "2026-01-01T12:00:00Z",
}  # fmt: skip
EVALUATION_EXAMPLE = {
    "id": 5, "dataset": 3, "agent": "support", "agent_version": 4, "status": "completed",
    "started_by": "alice", "cases": 12, "passed": 11, "failed": 1, "errors": 0, "score": 0.917,
    "judge_input_tokens": 0, "judge_output_tokens": 0, "created_at": "2026-01-01T12:00:00Z",
    "finished_at": "2026-01-01T12:01:00Z",
}  # fmt: skip


def shown(name: str, value: Any) -> OpenApiExample:
    return OpenApiExample(name, value, response_only=True)


# -- schemas ---------------------------------------------------------------------------
class DatasetSerializer(serializers.ModelSerializer):
    judge_connection = serializers.IntegerField(
        source="judge_connection_id",
        allow_null=True,
        read_only=True,
        help_text="The connection whose model judges `judge` cases; null: the tenant's default.",
    )
    cases = serializers.SerializerMethodField()

    class Meta:
        model = Dataset
        fields = [
            "id",
            "name",
            "description",
            "judge_connection",
            "judge_model",
            "cases",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_cases(self, dataset: Dataset) -> int:
        return selectors.dataset_case_count(dataset)


class DatasetWriteSerializer(StrictSerializer):
    name = serializers.RegexField(
        r"^[a-z0-9][a-z0-9_-]{0,49}$",
        max_length=50,
        required=False,
        help_text="Lowercase letters, digits, _ and -; unique in the tenant.",
    )
    description = serializers.CharField(max_length=10_000, required=False, allow_blank=True)
    judge_connection = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=2**63 - 1
    )
    judge_model = serializers.CharField(max_length=200, required=False, allow_blank=True)


CASE_EXPECT_HELP = (
    'One of: {"exact": <JSON>}, {"contains": "text"}, {"regex": "RE2 pattern"}, '
    '{"schema": {JSON Schema}}, {"succeeds": true}, {"judge": "rubric for the judge model"}.'
)


class CaseSerializer(serializers.ModelSerializer):
    dataset = serializers.IntegerField(source="dataset_id", read_only=True)
    source_run = serializers.IntegerField(source="source_run_id", read_only=True, allow_null=True)
    expect = serializers.JSONField(read_only=True, help_text=CASE_EXPECT_HELP)

    class Meta:
        model = Case
        fields = ["id", "dataset", "name", "input", "expect", "source_run", "created_at"]
        read_only_fields = fields


class CaseWriteSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)
    input = serializers.CharField(max_length=100_000, required=False, trim_whitespace=False)
    expect = JSONObjectField(required=False, help_text=CASE_EXPECT_HELP)


class ResultSerializer(serializers.ModelSerializer):
    case = serializers.IntegerField(source="case_id", read_only=True, allow_null=True)
    run = serializers.IntegerField(source="run_id", read_only=True, allow_null=True)
    expect = serializers.JSONField(read_only=True)

    class Meta:
        model = EvaluationResult
        fields = [
            "position",
            "case",
            "input",
            "expect",
            "run",
            "outcome",
            "score",
            "reason",
            "output",
            "judge_input_tokens",
            "judge_output_tokens",
            "scored_at",
        ]
        read_only_fields = fields


class EvaluationSerializer(serializers.ModelSerializer):
    dataset = serializers.CharField(source="dataset.name", read_only=True)
    agent = serializers.CharField(source="agent_slug", read_only=True)
    started_by = serializers.CharField(source="started_by_label", read_only=True)
    score = serializers.FloatField(read_only=True, allow_null=True)

    class Meta:
        model = Evaluation
        fields = [
            "id",
            "dataset",
            "agent",
            "agent_version",
            "status",
            "started_by",
            "cases",
            "passed",
            "failed",
            "errors",
            "score",
            "judge_input_tokens",
            "judge_output_tokens",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields


class EvaluationDetailSerializer(EvaluationSerializer):
    results = ResultSerializer(many=True, read_only=True)

    class Meta(EvaluationSerializer.Meta):
        fields = [*EvaluationSerializer.Meta.fields, "results"]
        read_only_fields = fields


class EvaluationCreateSerializer(StrictSerializer):
    dataset = serializers.CharField(max_length=100, help_text="The dataset's name (or id).")
    agent = serializers.RegexField(
        r"^[a-z0-9][a-z0-9_-]{0,49}$", max_length=50, help_text="The agent's slug."
    )


class ComparedResultSerializer(serializers.Serializer):
    position = serializers.IntegerField()
    name = serializers.CharField()
    input = serializers.CharField()
    left = ResultSerializer(allow_null=True)
    right = ResultSerializer(allow_null=True)
    changed = serializers.BooleanField(help_text="The two outcomes differ.")


class ComparisonSerializer(serializers.Serializer):
    left = EvaluationSerializer()
    right = EvaluationSerializer()
    cases = ComparedResultSerializer(many=True)


class FeedbackSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="run_id", read_only=True)
    by = serializers.CharField(source="by_label", read_only=True)
    added_case = serializers.SerializerMethodField()

    class Meta:
        model = Feedback
        fields = ["id", "run", "rating", "note", "by", "added_case", "created_at", "updated_at"]
        read_only_fields = fields

    def get_added_case(self, feedback: Feedback) -> int | None:
        case = self.context.get("case")
        return case.pk if case is not None else None


class FeedbackWriteSerializer(StrictSerializer):
    rating = serializers.ChoiceField(choices=Rating.choices)
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    add_to_dataset = serializers.CharField(
        max_length=100,
        required=False,
        help_text="A dataset's name: the exchange (the run's input, its answer expected) "
        "becomes a case of it.",
    )
    match = serializers.ChoiceField(
        choices=["exact", "contains"],
        default="contains",
        help_text="How the added case expects the answer.",
    )


def _no_nul(data: dict[str, Any]) -> dict[str, Any]:
    for name, value in data.items():
        if isinstance(value, str) and "\x00" in value:
            raise serializers.ValidationError({name: ["Text may not contain NUL characters."]})
    return data


# -- views -----------------------------------------------------------------------------
class EvaluationsView(TenantPolicyView, GenericAPIView):
    read_action = Action.READ_CONFIG
    write_action = Action.CHANGE_CONFIG
    parser_classes = PARSERS

    def dataset(self, dataset_id: str) -> Dataset:
        return dataset_get(tenant=self.tenant, name_or_id=path_id(dataset_id, "dataset"))

    def body(self, serializer_class, *, partial: bool = False) -> dict[str, Any]:
        body = serializer_class(data=self.request.data, partial=partial)
        body.is_valid(raise_exception=True)
        return _no_nul(dict(body.validated_data))


def _dataset_changes(tenant: Tenant, data: dict[str, Any]) -> dict[str, Any]:
    if "judge_connection" in data and data["judge_connection"] is not None:
        connection = connection_of(tenant=tenant, connection_id=data["judge_connection"])
        if connection is None:
            raise serializers.ValidationError(
                {"judge_connection": ["Choose one of this tenant's connections."]}
            )
        data["judge_connection"] = connection
    return data


class DatasetListCreate(EvaluationsView):
    serializer_class = DatasetSerializer
    pagination_class = NewestFirstChecked

    def get_queryset(self) -> QuerySet[Dataset]:
        return selectors.datasets_of(tenant=self.tenant)

    @extend_schema(
        summary="List datasets",
        responses={200: DatasetSerializer(many=True), **ERRORS},
        examples=[shown("Datasets", [DATASET_EXAMPLE])],
    )
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(DatasetSerializer(page, many=True).data)

    @extend_schema(
        summary="Create a dataset",
        request=DatasetWriteSerializer,
        responses={201: DatasetSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Support",
                value={"name": "support", "description": "Questions customers ask."},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.body(DatasetWriteSerializer)
        if "name" not in data:
            raise serializers.ValidationError({"name": ["This field is required."]})
        dataset = dataset_save(tenant=self.tenant, changes=_dataset_changes(self.tenant, data))
        return Response(DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


class DatasetDetail(EvaluationsView):
    serializer_class = DatasetSerializer

    @extend_schema(
        summary="Get a dataset",
        responses={200: DatasetSerializer, **ERRORS},
        examples=[shown("A dataset", DATASET_EXAMPLE)],
    )
    def get(self, request: Request, dataset_id: str) -> Response:
        return Response(DatasetSerializer(self.dataset(dataset_id)).data)

    @extend_schema(
        summary="Change a dataset",
        request=DatasetWriteSerializer,
        responses={200: DatasetSerializer, **ERRORS},
        examples=[shown("Changed", DATASET_EXAMPLE)],
    )
    def patch(self, request: Request, dataset_id: str) -> Response:
        dataset = self.dataset(dataset_id)
        data = _dataset_changes(self.tenant, self.body(DatasetWriteSerializer, partial=True))
        dataset = dataset_save(tenant=self.tenant, dataset=dataset, changes=data)
        return Response(DatasetSerializer(dataset).data)

    @extend_schema(
        summary="Delete a dataset", description="With its cases and evaluations.",
        responses={204: None, **ERRORS}, examples=[NOT_FOUND_EXAMPLE],
    )  # fmt: skip
    def delete(self, request: Request, dataset_id: str) -> Response:
        dataset_delete(tenant=self.tenant, dataset=self.dataset(dataset_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class CaseListCreate(EvaluationsView):
    serializer_class = CaseSerializer
    pagination_class = OldestFirst

    @extend_schema(
        summary="List a dataset's cases",
        description="In their order, cursor-paginated (at most 1,000 per dataset).",
        responses={200: CaseSerializer(many=True), **ERRORS},
        examples=[shown("Cases", [CASE_EXAMPLE])],
    )
    def get(self, request: Request, dataset_id: str) -> Response:
        page = self.paginate_queryset(selectors.dataset_cases(dataset=self.dataset(dataset_id)))
        return self.get_paginated_response(CaseSerializer(page, many=True).data)

    @extend_schema(
        summary="Add a case",
        request=CaseWriteSerializer,
        responses={201: CaseSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Judged",
                value={"input": "I was charged twice.", "expect": {"judge": "Apologises."}},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, dataset_id: str) -> Response:
        dataset = self.dataset(dataset_id)
        case = case_save(
            tenant=self.tenant, dataset=dataset, changes=self.body(CaseWriteSerializer)
        )
        return Response(CaseSerializer(case).data, status=status.HTTP_201_CREATED)


class CaseDetail(EvaluationsView):
    serializer_class = CaseSerializer

    def case(self, dataset_id: str, case_id: str) -> Case:
        dataset = self.dataset(dataset_id)
        case_id = path_id(case_id, "case")
        return selectors.case_get(tenant=self.tenant, dataset=dataset, case_id=case_id)

    @extend_schema(
        summary="Get a case",
        responses={200: CaseSerializer, **ERRORS},
        examples=[shown("A case", CASE_EXAMPLE)],
    )
    def get(self, request: Request, dataset_id: str, case_id: str) -> Response:
        return Response(CaseSerializer(self.case(dataset_id, case_id)).data)

    @extend_schema(
        summary="Change a case", request=CaseWriteSerializer,
        responses={200: CaseSerializer, **ERRORS},
        examples=[shown("Changed", CASE_EXAMPLE)],
    )  # fmt: skip
    def patch(self, request: Request, dataset_id: str, case_id: str) -> Response:
        case = self.case(dataset_id, case_id)
        changes = self.body(CaseWriteSerializer, partial=True)
        case = case_save(tenant=self.tenant, dataset=case.dataset, case=case, changes=changes)
        return Response(CaseSerializer(case).data)

    @extend_schema(
        summary="Delete a case", responses={204: None, **ERRORS}, examples=[NOT_FOUND_EXAMPLE]
    )
    def delete(self, request: Request, dataset_id: str, case_id: str) -> Response:
        case_delete(tenant=self.tenant, case=self.case(dataset_id, case_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class EvaluationListCreate(EvaluationsView):
    read_action = Action.READ_RUN
    write_action = Action.START_RUN
    serializer_class = EvaluationSerializer
    pagination_class = NewestFirstChecked

    def get_queryset(self) -> QuerySet[Evaluation]:
        return visible_evaluations(self.principal)

    @extend_schema(
        summary="List evaluations",
        description="Newest first: admins see every evaluation, others those they started.",
        responses={200: EvaluationSerializer(many=True), **ERRORS},
        examples=[shown("Evaluations", [EVALUATION_EXAMPLE])],
    )
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(EvaluationSerializer(page, many=True).data)

    @extend_schema(
        summary="Start an evaluation",
        description="Runs every case of the dataset against the agent on the batch queue "
        "(never ahead of interactive runs), scores each, and records a verdict on each "
        "succeeded run. Poll the evaluation until `status` is `completed`.",
        request=EvaluationCreateSerializer,
        responses={201: EvaluationSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Start", value={"dataset": "support", "agent": "assistant"}, request_only=True
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.body(EvaluationCreateSerializer)
        dataset = dataset_get(tenant=self.tenant, name_or_id=path_text(data["dataset"]))
        agent = selectors.agent_usable(principal=self.principal, slug=data["agent"])
        evaluation = evaluation_start(
            tenant=self.tenant, dataset=dataset, agent=agent, by=request_user_or_key(request)
        )
        return Response(EvaluationSerializer(evaluation).data, status=status.HTTP_201_CREATED)


class EvaluationDetail(EvaluationsView):
    read_action = Action.READ_RUN
    write_action = None
    serializer_class = EvaluationDetailSerializer

    @extend_schema(
        summary="Get an evaluation", description="With each case's result and run.",
        responses={200: EvaluationDetailSerializer, **ERRORS},
        examples=[shown("An evaluation", {**EVALUATION_EXAMPLE, "results": []})],
    )  # fmt: skip
    def get(self, request: Request, evaluation_id: str) -> Response:
        evaluation = visible_evaluation(self.principal, path_id(evaluation_id, "evaluation"))
        return Response(EvaluationDetailSerializer(evaluation).data)


class EvaluationCancel(EvaluationsView):
    read_action = Action.READ_RUN
    write_action = Action.CANCEL_RUN
    serializer_class = EvaluationSerializer

    @extend_schema(
        summary="Stop an evaluation",
        description="No further case starts; cases already running finish and are scored. "
        "Its starter or an admin. Stopping a finished evaluation changes nothing.",
        request=None,
        responses={200: EvaluationSerializer, **ERRORS},
        examples=[shown("Stopped", {**EVALUATION_EXAMPLE, "status": "cancelled"})],
    )
    def post(self, request: Request, evaluation_id: str) -> Response:
        evaluation = visible_evaluation(self.principal, path_id(evaluation_id, "evaluation"))
        evaluation = evaluation_cancel(tenant=self.tenant, evaluation=evaluation, by=self.principal)
        return Response(EvaluationSerializer(evaluation).data)


class EvaluationCompare(EvaluationsView):
    read_action = Action.READ_RUN
    write_action = None
    serializer_class = ComparisonSerializer

    @extend_schema(
        summary="Compare two evaluations",
        description="Two evaluations of the same dataset (two agents, or one agent before "
        "and after a change), case by case. Evaluations of different datasets: 400.",
        responses={200: ComparisonSerializer, **ERRORS},
        examples=[
            shown(
                "Side by side",
                {"left": EVALUATION_EXAMPLE, "right": {**EVALUATION_EXAMPLE, "id": 6}, "cases": []},
            )
        ],
    )
    def get(self, request: Request, evaluation_id: str, other_id: str) -> Response:
        left = visible_evaluation(self.principal, path_id(evaluation_id, "evaluation"))
        right = visible_evaluation(self.principal, path_id(other_id, "evaluation"))
        rows = evaluation_compare(left, right)
        data = {
            "left": EvaluationSerializer(left).data,
            "right": EvaluationSerializer(right).data,
            "cases": [
                {
                    "position": row.position,
                    "name": row.name,
                    "input": row.input,
                    "left": ResultSerializer(row.left).data if row.left else None,
                    "right": ResultSerializer(row.right).data if row.right else None,
                    "changed": row.changed,
                }
                for row in rows
            ],
        }
        return Response(data)


class RunFeedback(EvaluationsView):
    read_action = Action.READ_RUN
    write_action = Action.VERIFY_RUN
    serializer_class = FeedbackSerializer

    @extend_schema(
        summary="Rate a run (thumbs up or down)",
        description="The run's starter or an admin; one rating per run and person, replaced "
        "by the next. With `add_to_dataset`, the exchange also becomes a case of that "
        "dataset (its answer expected `exact`ly or as `contains`; editable later; needs "
        "the write scope).",
        request=FeedbackWriteSerializer,
        responses={201: FeedbackSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Good answer",
                value={"rating": "up", "add_to_dataset": "support", "match": "contains"},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = access.visible_run(self.principal, path_id(run_id, "run"))
        data = self.body(FeedbackWriteSerializer)
        by = request_user_or_key(request)
        dataset = None
        if data.get("add_to_dataset"):
            dataset = dataset_get(tenant=self.tenant, name_or_id=data["add_to_dataset"])
        feedback = feedback_record(
            tenant=self.tenant, run=run, by=by, rating=data["rating"], note=data["note"]
        )
        case = None
        if dataset is not None:
            case = case_from_run(
                tenant=self.tenant, run=run, dataset=dataset, by=by, match=data["match"]
            )
        body = FeedbackSerializer(feedback, context={"case": case}).data
        return Response(body, status=status.HTTP_201_CREATED)
