"""The shared shape of the tenant resource endpoints (agents, crews, tools, ...).

Every resource view acts for `request_tenant(request)`, reads through its app's selectors
(tenant-filtered: another tenant's ids answer 404), asks the access policy for
`read_action`/`write_action` (per DRF action in `action_policy`), and refuses input it
cannot store (unknown fields, NUL characters, absurd nesting) with a 400 instead of letting
the database or the JSON parser answer with a 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, parsers, serializers, viewsets

from agentplatform.api.errors import Conflict
from agentplatform.api.pagination import MAX_BIGINT, NewestFirstChecked, OldestFirst
from agentplatform.api.parsers import SafeJSONParser
from agentplatform.api.schema import ERRORS, error
from agentplatform.api.tenant import (
    TenantPolicyView,
    allowed,
    request_user_or_key,
)
from tenancy.authentication import ApiClient
from tenancy.models import Tenant
from tenancy.policy import Action
from tenancy.records.saving import SaveConflict

MAX_JSON_DEPTH = 32


# -- input the database or the parser would choke on -------------------------------------
PARSERS = [SafeJSONParser, parsers.FormParser, parsers.MultiPartParser]
__all__ = ["PARSERS", "NewestFirstChecked", "OldestFirst", "SafeJSONParser"]  # re-exported


def check_json_value(value: Any, depth: int = 0) -> None:
    """Refuse what Postgres `jsonb` cannot store (NUL, lone surrogates) and deep nesting."""
    if depth > MAX_JSON_DEPTH:
        raise serializers.ValidationError(f"Nested more than {MAX_JSON_DEPTH} levels deep.")
    if isinstance(value, str):
        if "\x00" in value:
            raise serializers.ValidationError("Text may not contain NUL characters.")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise serializers.ValidationError("Text must be valid Unicode.") from None
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_json_value(key, depth + 1)
            check_json_value(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            check_json_value(item, depth + 1)


class StoredJSONField(serializers.JSONField):
    """A JSON value that Postgres can store (see check_json_value)."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        check_json_value(value)
        return value


class JSONObjectField(StoredJSONField):
    """A JSON object (not a list, string or number)."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if value is not None and not isinstance(value, dict):
            raise serializers.ValidationError("Give a JSON object.")
        return value


# -- serializers -----------------------------------------------------------------------
class StrictSerializerMixin:
    """Unknown fields are a 400 (a typo must not be silently dropped). Read-only fields
    may be sent back as received from a GET; they are ignored. A form's CSRF token is not
    a field."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(
                str(name)
                for name in data
                if name not in self.fields and name != "csrfmiddlewaretoken"
            )
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class StrictSerializer(StrictSerializerMixin, serializers.Serializer):
    pass


class CleanModelSerializer(StrictSerializerMixin, serializers.ModelSerializer):
    """Saves through the owning app's service, which runs the model's `full_clean()` (its
    rules, constraints and cross-field checks), so the API accepts exactly what the admin
    and the web UI accept.

    `save(tenant=...)` names the tenant on create (the request's tenant otherwise). A lost
    race on a unique constraint (the service's SaveConflict) answers 409 instead of a 500.
    """

    def create(self, validated_data: dict[str, Any]) -> models.Model:
        return self._save(None, validated_data)

    def update(self, instance: models.Model, validated_data: dict[str, Any]) -> models.Model:
        return self._save(instance, validated_data)

    def _save(self, instance: models.Model | None, validated_data: dict[str, Any]) -> models.Model:
        changes = dict(validated_data)
        tenant = changes.pop("tenant", None) or self.context["tenant"]
        try:
            return self.save_with_service(tenant, instance, changes)
        except SaveConflict as exc:
            raise Conflict(str(exc)) from None

    def save_with_service(
        self, tenant: Tenant, instance: models.Model | None, changes: dict[str, Any]
    ) -> models.Model:
        """Create (instance None) or change the object through its app's service."""
        raise NotImplementedError


# -- request details -------------------------------------------------------------------
def query_bool(request, name: str) -> bool | None:
    """`?name=true|false|1|0|yes|no`; absent: None; anything else: 400."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise exceptions.ValidationError({name: ["Use true or false."]})


def query_int(request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_BIGINT:
        raise exceptions.ValidationError({name: ["Give a numeric id."]})
    return int(raw)


def query_text(request, name: str, max_length: int = 200) -> str | None:
    """A text filter; absent or empty: None. NUL characters (which Postgres refuses) and
    overlong values are a 400."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if "\x00" in raw or len(raw) > max_length:
        raise exceptions.ValidationError({name: ["Not a valid value."]})
    return raw


def path_text(value: str, what: str = "object") -> str:
    """A path slug or name; what cannot be one (NUL, overlong) answers 404."""
    if "\x00" in value or len(value) > 200:
        raise Http404(f"No such {what}.")
    return value


def path_id(value: Any, what: str = "object") -> int:
    """A path id as an int; anything that cannot be an id answers 404 like a missing one."""
    text = str(value)
    if not text.isascii() or not text.isdigit() or int(text) > MAX_BIGINT:
        raise Http404(f"No such {what}.")
    return int(text)


# -- views -------------------------------------------------------------------------------
class TenantViewSet(TenantPolicyView, viewsets.GenericViewSet):
    """Base of the resource viewsets: tenant, policy, parsers, pagination, 404 lookups.

    Safe methods need `read_action`, others `write_action`; `action_policy` names the
    action of a DRF action (e.g. `execute`) that is neither."""

    read_action: Action = Action.READ_CONFIG
    write_action: Action = Action.CHANGE_CONFIG
    action_policy: dict[str, Action] = {}
    parser_classes = PARSERS
    pagination_class = NewestFirstChecked
    lookup_value_regex = "[^/]+"  # every path value reaches the view (and its 404)

    def get_permissions(self):
        special = self.action_policy.get(self.action or "")
        if special is not None:
            return [allowed(special)()]
        return super().get_permissions()

    @property
    def actor(self):
        """Who acts: the ApiKey or the session's user."""
        return request_user_or_key(self.request)

    @property
    def is_api_key(self) -> bool:
        return isinstance(self.request.user, ApiClient)

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if getattr(self, "swagger_fake_view", False):
            return context
        context["tenant"], context["principal"] = self.tenant, self.principal
        return context


ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH)
NOT_FOUND_EXAMPLE = OpenApiExample(
    "Not found",
    {"error": {"code": "not_found", "message": "No such object.", "details": {}}},
    response_only=True,
    status_codes=["404"],
)
CONFLICT = {409: error("It changed meanwhile (e.g. a duplicate created concurrently).")}


def crud_schema(
    name: str, plural: str, serializer, *, lookup, filters, request_example, response_example
):
    """The five CRUD operations' documentation for one resource."""
    a_name = f"{'an' if name[0] in 'aeiou' else 'a'} {name}"
    request_only = OpenApiExample(a_name.capitalize(), value=request_example, request_only=True)
    response_only = OpenApiExample(a_name.capitalize(), value=response_example, response_only=True)
    patch_example = OpenApiExample(
        f"Change a {name}", value={"description": "Updated."}, request_only=True
    )
    return {
        "list": extend_schema(
            summary=f"List {plural}",
            parameters=filters,
            responses={200: serializer(many=True), **ERRORS},
            examples=[response_only],
        ),
        "create": extend_schema(
            summary=f"Create {a_name}",
            request=serializer,
            responses={201: serializer, **ERRORS, **CONFLICT},
            examples=[request_only, response_only],
        ),
        "retrieve": extend_schema(
            summary=f"Get {a_name}",
            parameters=[lookup],
            responses={200: serializer, **ERRORS},
            examples=[response_only],
        ),
        "update": extend_schema(
            summary=f"Update {a_name}",
            description="The required fields must be given; fields left out keep their "
            "values (write-only secrets too).",
            parameters=[lookup],
            request=serializer,
            responses={200: serializer, **ERRORS, **CONFLICT},
            examples=[request_only, response_only],
        ),
        "partial_update": extend_schema(
            summary=f"Change some fields of {a_name}",
            parameters=[lookup],
            request=serializer,
            responses={200: serializer, **ERRORS, **CONFLICT},
            examples=[patch_example, response_only],
        ),
        "destroy": extend_schema(
            summary=f"Delete {a_name}",
            parameters=[lookup],
            responses={204: None, **ERRORS},
            examples=[NOT_FOUND_EXAMPLE],
        ),
    }


class TenantCrudViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantViewSet,
):
    model: type[models.Model]

    def get_queryset(self) -> models.QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return self.model.objects.none()
        return self.select(**(self.list_filters() if self.action == "list" else {}))

    def select(self, **filters: Any) -> models.QuerySet:
        """The tenant's objects, from the owning app's selector; `filters` are the list's
        (`list_filters`)."""
        raise NotImplementedError

    def list_filters(self) -> dict[str, Any]:
        """The list's query-parameter filters, as keyword arguments of `select`."""
        return {}

    def perform_create(self, serializer) -> None:
        serializer.save(tenant=self.tenant)

    def perform_destroy(self, instance: models.Model) -> None:
        self.delete_with_service(instance)

    def delete_with_service(self, instance: models.Model) -> None:
        """Delete the object through its app's service."""
        raise NotImplementedError
