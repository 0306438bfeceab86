"""`GET`/`PATCH /api/v1/time-zone`: the tenant's time zone, where the days and months of its
quotas begin (docs/quotas.md). Read: the read scope or any member; change: the config scope
or an admin, as the quotas themselves."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.schema import ERRORS
from agentplatform.api.tenant import allowed, request_tenant
from tenancy.policy import Action
from tenancy.services import tenant_time_zone_set


class TimeZoneBody(serializers.Serializer):
    time_zone = serializers.CharField(
        max_length=64, help_text="An IANA name: Europe/Lisbon, America/New_York, UTC."
    )


EXAMPLE = OpenApiExample("Lisbon", {"time_zone": "Europe/Lisbon"})


class TimeZoneView(APIView):
    read_action = Action.READ_CONFIG
    write_action = Action.CHANGE_CONFIG

    def get_permissions(self):
        return [allowed(self.read_action, self.write_action)()]

    @extend_schema(
        summary="The tenant's time zone",
        description="Where the calendar days and months of its quotas begin.",
        responses={200: TimeZoneBody, **ERRORS},
        examples=[EXAMPLE],
    )
    def get(self, request: Request) -> Response:
        return Response({"time_zone": request_tenant(request).time_zone})

    @extend_schema(
        summary="Set the tenant's time zone",
        description="An IANA time zone name (400 naming `time_zone` otherwise). The limits "
        "use it from their next call; the current period's counters carry on.",
        request=TimeZoneBody,
        responses={200: TimeZoneBody, **ERRORS},
        examples=[EXAMPLE],
    )
    def patch(self, request: Request) -> Response:
        body = TimeZoneBody(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = request_tenant(request)
        tenant_time_zone_set(tenant=tenant, time_zone=body.validated_data["time_zone"])
        return Response({"time_zone": tenant.time_zone})
