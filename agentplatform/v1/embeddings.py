"""`POST /v1/embeddings` in OpenAI's shape, through a tenant's connection or the platform's
own models.

`model` is `<connection>/<model>` (the connection's name slugified, a model it allows,
e.g. `openai/text-embedding-3-small`) for a connection whose service has an embeddings
endpoint, or one of the platform's own models, named as knowledge bases name them
(`rag.embedders.builtin_models`, also listed by `/v1/models`): `static`, the built-in
static model distilled from all-MiniLM-L6-v2 (256 dimensions: rag/runtime/static_embedder.py),
on every install, and `local`, all-MiniLM-L6-v2 itself (384 dimensions, on the CPU), where
its optional install is. They give the vectors a knowledge base of theirs stores (the same
process-wide embedders), computed on a thread (CPU work), at most MAX_BUILTIN_CHARS a request.
Each call is recorded as a run of the key (`Run.gateway_model`, its input tokens: what the
provider counted, or the word pieces the platform's model read), so the usage page and
the key's runs show it. A key limited to some agents may not use it.
Every model is held against the quotas of the tenant and the key before it embeds
(agents.quotas: the texts' estimate, settled to the counted tokens; a limit that cannot take
it is a 429 `insufficient_quota`); the platform's own models are priced at the price kind
`local` (nothing, unless the tenant has a price for it).
"""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import Sequence
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
from rag.embedders import builtin_models, local_embedder, static_embedder
from rag.runtime.embeddings import EmbeddingError
from tenancy.authentication import ApiClient
from tenancy.policy import Action, declares

LOCAL = "local"
STATIC = "static"
BUILTIN_PRICE_KIND = "local"  # the platform's own models' records and holds are priced at it
MAX_BUILTIN_CHARS = 300_000  # a request's texts in all, for the platform's own (CPU) models


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


async def _hold(
    client: ApiClient, price_kind: str, model: str, texts: list[str]
) -> quotas.Reservation:
    """The texts' estimate held against the limits of the tenant and the key, priced as the
    call's record will be (`price_kind`: its connection's, or the platform's own); a 429
    when one cannot take it."""
    tokens = sum(quotas.estimate_text_tokens(text) for text in texts)
    meter = quotas.Meter(tenant_id=client.api_key.tenant_id, api_key_id=client.api_key.pk)
    cost = quotas.call_cost(meter.tenant_id, price_kind, model, tokens, 0)
    try:
        return await quotas.reserve_async(meter, tokens=tokens, cost_usd=cost)
    except quotas.QuotaExceeded as exc:
        raise quota_error(exc) from None


async def _settle(
    held: quotas.Reservation, client: ApiClient, price_kind: str, model: str, tokens: int
) -> None:
    used = Usage(input_tokens=tokens)
    await quotas.settle_usage(held, client.api_key.tenant_id, price_kind, model, used)


def _builtin(parsed: EmbeddingsRequest):
    """The platform's model `parsed` names (the process's one), after checking the request
    fits it: a 404 for MiniLM where it is not installed, a 400 for other dimensions or
    more text than MAX_BUILTIN_CHARS."""
    if parsed.model not in builtin_models():
        raise OpenAIError(
            404,
            f"The model `{parsed.model}` is not installed on this server (`static` is).",
            param="model",
            code="model_not_found",
        )
    embedder = static_embedder() if parsed.model == STATIC else local_embedder()
    if parsed.dimensions not in (None, embedder.dimensions):
        raise BadRequest(
            f"The {parsed.model} model has {embedder.dimensions} dimensions.", "dimensions"
        )
    if sum(len(text) for text in parsed.texts) > MAX_BUILTIN_CHARS:
        raise BadRequest(
            f"The {parsed.model} model embeds at most {MAX_BUILTIN_CHARS:,} characters a "
            "request in all: send the texts in smaller batches.",
            "input",
        )
    return embedder


def _embed_counted(embedder, texts: Sequence[str]) -> tuple[list[list[float]], int]:
    """The vectors and the word pieces the model read (blocking: CPU work)."""
    return embedder.embed_sync(texts), embedder.count_tokens(texts)


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
            embedder = _builtin(parsed)
            priced = (BUILTIN_PRICE_KIND, parsed.model)
            held, tokens = await _hold(client, *priced, parsed.texts), 0
            try:  # (on a thread: milliseconds to seconds of CPU would stall the loop)
                vectors, tokens = await asyncio.to_thread(_embed_counted, embedder, parsed.texts)
            finally:  # the model's count (nothing when it failed)
                await _settle(held, client, *priced, tokens)
            provider = parsed.model
        else:
            connection, model = target
            priced = (connection.price_kind, model)
            held, tokens = await _hold(client, *priced, parsed.texts), 0
            try:
                vectors, tokens = await adapter_for(connection).embeddings(
                    parsed.texts, model=model, dimensions=parsed.dimensions
                )
            finally:  # the provider's count (nothing when it failed)
                await _settle(held, client, *priced, tokens)
            provider = connection.kind
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
