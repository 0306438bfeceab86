"""`GET /api/v1/usage`: runs, tokens and cost per agent, member, API key and day over the
last `days` days; `GET /api/v1/usage/export`: the same period as CSV rows (day x agent x
member x API key). The runs counted are those the caller may see (agents.access), as on
the usage page; both read through agents.usage_report."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, renderers, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.schema import ERRORS
from agentplatform.api.tenant import allowed, request_principal, request_tenant
from agents.selectors import runs_since
from agents.usage_report import (
    MAX_DAYS,
    Period,
    cost_lines,
    total_cost,
    usage_csv,
    usage_rows,
)
from tenancy.policy import Action

DAYS = OpenApiParameter(
    "days", OpenApiTypes.INT, description=f"The period: today and the days before it, 1 to "
    f"{MAX_DAYS} (default 30), in the server's time zone.",
)  # fmt: skip


class CostLineSerializer(serializers.Serializer):
    key = serializers.CharField(
        help_text='"agent:<id>", "crew:<id>", "tool:<name>", "model:<gateway model>", '
        '"member:<user id>", "api_key:<id>", a day (YYYY-MM-DD), or "none"'
    )
    label = serializers.CharField()
    runs = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost_usd = serializers.DecimalField(max_digits=16, decimal_places=6)


class UsageReportSerializer(serializers.Serializer):
    days = serializers.IntegerField()
    start = serializers.DateTimeField(help_text="Midnight of the first day.")
    runs = serializers.IntegerField()
    cost_usd = serializers.DecimalField(max_digits=16, decimal_places=6)
    by_agent = CostLineSerializer(many=True)
    by_member = CostLineSerializer(many=True)
    by_api_key = CostLineSerializer(many=True)
    by_day = CostLineSerializer(many=True, help_text="Days with runs only, oldest first.")


LINE = {"runs": 4, "input_tokens": 5200, "output_tokens": 410, "cost_usd": "0.017100"}
EXAMPLE = {
    "days": 7,
    "start": "2026-01-01T00:00:00Z",
    "runs": 4,
    "cost_usd": "0.017100",
    "by_agent": [{"key": "agent:3", "label": "Assistant", **LINE}],
    "by_member": [{"key": "member:5", "label": "alice", **LINE}],
    "by_api_key": [{"key": "none", "label": "(no API key: signed-in members)", **LINE}],
    "by_day": [{"key": "2026-01-03", "label": "2026-01-03", **LINE}],
}


def _period(request: Request) -> Period:
    raw = request.query_params.get("days", "30")
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_DAYS:
        raise exceptions.ValidationError({"days": [f"A whole number from 1 to {MAX_DAYS}."]})
    return Period.ending_today(int(raw))


class UsageView(APIView):
    read_action = Action.READ_USAGE
    write_action = None

    def get_permissions(self):
        return [allowed(self.read_action)()]

    def runs(self, period: Period):
        request_tenant(self.request)  # (the tenant is named, and the caller a member)
        principal = request_principal(self.request)
        return runs_since(principal=principal, since=period.start)


class UsageReport(UsageView):
    @extend_schema(
        summary="Usage and cost",
        description="Runs, tokens and cost (US dollars) per agent, member, API key and day "
        "over the period. Admins (and keys made by one) count every run of the tenant, "
        "others the runs they started. Cost sums each run's own `cost_usd`, so a crew's "
        "members count once; a crew's run carries its members' tokens too.",
        parameters=[DAYS],
        responses={200: UsageReportSerializer, **ERRORS},
        examples=[OpenApiExample("A week", EXAMPLE, response_only=True)],
    )
    def get(self, request: Request) -> Response:
        period = _period(request)
        runs = self.runs(period)
        lines: dict[str, Any] = {g: cost_lines(runs, g) for g in ("agent", "member", "api_key")}
        by_day = cost_lines(runs, "day")
        report = {
            "days": period.days,
            "start": period.start,
            "runs": sum(line.runs for line in by_day),
            "cost_usd": total_cost(by_day),
            "by_agent": lines["agent"],
            "by_member": lines["member"],
            "by_api_key": lines["api_key"],
            "by_day": by_day,
        }
        return Response(UsageReportSerializer(report).data)


class CSVRenderer(renderers.BaseRenderer):
    """Lets a client that accepts only text/csv through negotiation (the export answers
    with its own response); an error is sent as JSON text all the same."""

    media_type = "text/csv"
    format = "csv"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return renderers.JSONRenderer().render(data)


class UsageExport(UsageView):
    renderer_classes = [renderers.JSONRenderer, CSVRenderer]

    @extend_schema(
        summary="Usage and cost as CSV",
        description="A row per day x agent (or crew, tool, gateway model) x member x API "
        "key: date, subject, member, api_key, runs, input_tokens, output_tokens, "
        "cache_read_tokens, cache_write_tokens, cost_usd.",
        parameters=[DAYS],
        responses={
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="CSV text"),
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "A day",
                "date,subject,member,api_key,runs,input_tokens,output_tokens,"
                "cache_read_tokens,cache_write_tokens,cost_usd\n"
                "2026-01-03,Assistant,alice,,4,5200,410,0,0,0.017100\n",
                response_only=True,
                media_type="text/csv",
            )
        ],
    )
    def get(self, request: Request) -> HttpResponse:
        period = _period(request)
        body = usage_csv(usage_rows(self.runs(period)))
        response = HttpResponse(body, content_type="text/csv; charset=utf-8")
        name = f"usage-{timezone.localdate():%Y-%m-%d}-{period.days}d.csv"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
