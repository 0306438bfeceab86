"""`POST /v1/embeddings` in OpenAI's shape, through a tenant's connection or the local model.

`model` is `<connection>/<model>` (the connection's name slugified, a model it allows,
e.g. `openai/text-embedding-3-small`) for a connection whose service has an embeddings
endpoint, `local` for the platform's own all-MiniLM-L6-v2 (384 dimensions, on the CPU, where
its optional install is), or `static` for the built-in static model distilled from it (256
dimensions: rag/runtime/static_embedder.py).
Each call is recorded as a run of the key (`Run.gateway_model`, its input tokens: what the
provider counted, an estimate of 4 characters a token for the local model), so the usage
page and the key's runs show it. A key limited to some agents may not use it.
A connection's model is held against the quotas of the tenant and the key before the
provider is asked (agents.quotas: the texts' estimate, settled to the tokens the provider
counted; a limit that cannot take it is a 429 `insufficient_quota`); the local models are not.
"""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from agentplatform.v1.chat_request import json_body
from agentplatform.v1.endpoint import (
    OpenAIError,
    allow_method,
    authorized,
    openai_errors,
    quota_error,
    require_raw_models,
)
from agentplatform.v1.shapes.base import BadRequest
from agentplatform.v1.shapes.embeddings import EmbeddingsRequest
from agents import quotas
from agents.runs import GatewayCall, record_gateway_calls
from base.stream_reads import brief
from providers.runtime.errors import ProviderError
from providers.runtime.types import Usage
from providers.services import adapter_for, connection_model
from rag.embedders import local_embedder, static_embedder
from rag.runtime.embeddings import EmbeddingError
from tenancy.authentication import ApiClient
from tenancy.policy import Action, declares

LOCAL = "local"
STATIC = "static"


def parse_embeddings_request(raw: bytes) -> EmbeddingsRequest:
    return EmbeddingsRequest.checked(json_body(raw))


def _target(client: ApiClient, model: str):
    require_raw_models(client)
    if model in (LOCAL, STATIC):
        return None
    found = connection_model(client.tenant, model)
    if found is None or not hasattr(adapter_for(found[0]), "embeddings"):
        raise OpenAIError(
            404,
            f"The model `{model}` does not exist or offers no embeddings.",
            param="model",
            code="model_not_found",
        )
    return found


def _record(
    client: ApiClient, model: str, provider: str, tokens: int, started, priced: tuple[str, str]
) -> None:
    """`priced`: the price kind and the model the provider was asked for (cost)."""
    call = GatewayCall(
        api_key=client.api_key,
        gateway_model=model,
        model=priced[1] or model,
        provider=provider,
        price_kind=priced[0],
        input=f"embeddings ({model})",
        usage=Usage(input_tokens=tokens),
        started_at=started,
    )
    record_gateway_calls([call])


async def _hold(client: ApiClient, target, texts: list[str]) -> quotas.Reservation:
    """The texts' estimate held against the limits of the tenant and the key, priced as the
    call's record will be (its connection's price kind); a 429 when one cannot take it."""
    connection, model = target
    tokens = sum(quotas.estimate_text_tokens(text) for text in texts)
    meter = quotas.Meter(tenant_id=client.api_key.tenant_id, api_key_id=client.api_key.pk)
    cost = quotas.call_cost(meter.tenant_id, connection.price_kind, model, tokens, 0)
    try:
        return await quotas.reserve_async(meter, tokens=tokens, cost_usd=cost)
    except quotas.QuotaExceeded as exc:
        raise quota_error(exc) from None


async def _settle(held: quotas.Reservation, client: ApiClient, target, tokens: int) -> None:
    connection, model = target
    used = Usage(input_tokens=tokens)
    await quotas.settle_usage(held, client.api_key.tenant_id, connection.price_kind, model, used)


def _vector(values: list[float], as_base64: bool) -> Any:
    if not as_base64:
        return values
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


@declares(Action.START_RUN, methods=("POST",))
@openai_errors
async def embeddings(request: HttpRequest) -> HttpResponse:
    allow_method(request, "POST")
    try:
        parsed: EmbeddingsRequest | BadRequest = parse_embeddings_request(request.body)
    except BadRequest as exc:
        parsed = exc
    client = await authorized(request, Action.START_RUN)
    if isinstance(parsed, BadRequest):
        raise parsed
    started = timezone.now()
    target = await brief(_target)(client, parsed.model)
    try:
        if target is None:
            embedder = static_embedder() if parsed.model == STATIC else local_embedder()
            if parsed.dimensions not in (None, embedder.dimensions):
                raise BadRequest(
                    f"The {parsed.model} model has {embedder.dimensions} dimensions.", "dimensions"
                )
            vectors = await embedder.embed(parsed.texts)
            tokens, provider = math.ceil(sum(len(t) for t in parsed.texts) / 4), parsed.model
            priced = (LOCAL, "")  # (no price: a local model costs nothing)
        else:
            connection, model = target
            held, tokens = await _hold(client, target, parsed.texts), 0
            try:
                vectors, tokens = await adapter_for(connection).embeddings(
                    parsed.texts, model=model, dimensions=parsed.dimensions
                )
            finally:  # the provider's count (nothing when it failed)
                await _settle(held, client, target, tokens)
            provider, priced = connection.kind, (connection.price_kind, model)
    except ProviderError as exc:  # (its text names no secret: the adapters redact keys)
        raise OpenAIError(502, f"The provider failed: {exc}", type="server_error") from None
    except EmbeddingError as exc:  # a local model is not installed or failed to load
        raise OpenAIError(503, str(exc), type="server_error") from None
    await brief(_record)(client, parsed.model, provider, tokens, started, priced)
    return JsonResponse(
        {
            "object": "list",
            "data": [
                {
                    "object": "embedding",
                    "index": i,
                    "embedding": _vector(v, parsed.encoding_format == "base64"),
                }
                for i, v in enumerate(vectors)
            ],
            "model": parsed.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )
