"""`GET /v1/models` and `GET /v1/models/{id}`: a tenant's agents and crews (an active agent's
slug, or else an active crew's), its gateway models (`<connection>/<model>`) and the
platform's own embedding models (`static`, and `local` where MiniLM is installed: what
`/v1/embeddings` serves without any connection), as OpenAI lists models. Needs the `read`
scope."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from agentplatform.v1.endpoint import (
    OpenAIError,
    allow_method,
    authorized,
    model_not_found,
    openai_errors,
)
from agents.models import Agent, Crew
from agents.selectors import active_agents_and_crews, model_target
from base.stream_reads import brief
from providers.services import gateway_models
from rag.embedders import builtin_models
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Action, declares

BUILTIN_OWNER = "agentplatform"
BUILTIN_CREATED = datetime(2025, 1, 1, tzinfo=UTC)  # (a fixed date: the models ship with it)


def _model_object(slug: str, created: Any, owner: str) -> dict[str, Any]:
    return {"id": slug, "object": "model", "created": int(created.timestamp()), "owned_by": owner}


def _builtin(key: ApiKey, slug: str) -> dict[str, Any] | None:
    """The platform's embedding model `slug`, for a key that may use the gateway."""
    if key.allowed_agents or slug not in builtin_models():
        return None
    return _model_object(slug, BUILTIN_CREATED, BUILTIN_OWNER)


def _models(key: ApiKey) -> list[dict[str, Any]]:
    """Active agents, then active crews whose slug no agent takes (the agent wins); only
    those a key limited to agents may run. Then each OpenAI(-compatible) connection's
    allowed models (its default model when it allows any) as `<connection>/<model>`, and the
    platform's embedding models (whose names no agent or crew takes)."""
    tenant = key.tenant
    slugs = key.allowed_agents or None
    seen: set[str] = set()
    data = []
    for item in active_agents_and_crews(tenant_id=tenant.pk, slugs=slugs):
        if item.slug not in seen:
            seen.add(item.slug)
            data.append(_model_object(item.slug, item.created_at, tenant.slug))
    if not key.allowed_agents:  # then the gateway's models (a key limited to agents has none)
        for model_id, created in gateway_models(tenant):
            data.append(_model_object(model_id, created, tenant.slug))
        for slug in builtin_models():
            if slug not in seen:
                data.append(_model_object(slug, BUILTIN_CREATED, BUILTIN_OWNER))
    return data


def resolve_model(tenant: Tenant, model: str) -> Agent | Crew:
    try:
        return model_target(tenant=tenant, slug=model)
    except Http404:
        raise model_not_found(model) from None


def _model(key: ApiKey, model_id: str) -> dict[str, Any]:
    """An agent or crew of the key's tenant, else one of the platform's embedding models."""
    try:
        target = resolve_model(key.tenant, model_id)
    except OpenAIError:
        found = _builtin(key, model_id)
        if found is None:
            raise
        return found
    return _model_object(target.slug, target.created_at, key.tenant.slug)


@declares(Action.READ_CONFIG)
@openai_errors
async def models_list(request: HttpRequest) -> HttpResponse:
    allow_method(request, "GET")
    client = await authorized(request, Action.READ_CONFIG)
    data = await brief(_models)(client.api_key)
    return JsonResponse({"object": "list", "data": data})


@declares(Action.READ_CONFIG)
@openai_errors
async def model_detail(request: HttpRequest, model_id: str) -> HttpResponse:
    allow_method(request, "GET")
    client = await authorized(request, Action.READ_CONFIG)
    if "\x00" in model_id or len(model_id) > 50:
        raise model_not_found(model_id)
    return JsonResponse(await brief(_model)(client.api_key, model_id))
