"""`GET /v1/models` and `GET /v1/models/{id}`: a tenant's agents and crews (an active agent's
slug, or else an active crew's) and its gateway models (`<connection>/<model>`), as OpenAI
lists models. Needs the `read` scope."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from agentplatform.v1.endpoint import allow_method, authorized, model_not_found, openai_errors
from agents.models import Agent, Crew
from agents.selectors import active_agents_and_crews, model_target
from base.stream_reads import brief
from providers.services import gateway_models
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Action, declares


def _model_object(slug: str, created: Any, tenant: Tenant) -> dict[str, Any]:
    return {
        "id": slug,
        "object": "model",
        "created": int(created.timestamp()),
        "owned_by": tenant.slug,
    }


def _models(key: ApiKey) -> list[dict[str, Any]]:
    """Active agents, then active crews whose slug no agent takes (the agent wins); only
    those a key limited to agents may run. Then each OpenAI(-compatible) connection's
    allowed models (its default model when it allows any) as `<connection>/<model>`."""
    tenant = key.tenant
    slugs = key.allowed_agents or None
    seen: set[str] = set()
    data = []
    for item in active_agents_and_crews(tenant_id=tenant.pk, slugs=slugs):
        if item.slug not in seen:
            seen.add(item.slug)
            data.append(_model_object(item.slug, item.created_at, tenant))
    if not key.allowed_agents:  # then the gateway's models (a key limited to agents has none)
        for model_id, created in gateway_models(tenant):
            data.append(_model_object(model_id, created, tenant))
    return data


def resolve_model(tenant: Tenant, model: str) -> Agent | Crew:
    try:
        return model_target(tenant=tenant, slug=model)
    except Http404:
        raise model_not_found(model) from None


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
    target = await brief(resolve_model)(client.tenant, model_id)
    return JsonResponse(_model_object(target.slug, target.created_at, client.tenant))
