"""POST /hooks/<public id>: a webhook trigger's inbound deliveries (docs/triggers.md).

No session nor API key: the HMAC signature over the raw body decides (agents.triggers).
Every answer is JSON: 202 with the run, or the refusal's status and reason — never a 500.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from agents.runtime.triggers import SIGNATURE_HEADER, TIMESTAMP_HEADER
from agents.triggers import HookRefused, webhook_deliver


@csrf_exempt
def hook(request: HttpRequest, public_id: str) -> JsonResponse:
    if request.method != "POST":
        response = _error(405, "POST a signed JSON body.")
        response["Allow"] = "POST"
        return response
    limit = settings.TRIGGER_WEBHOOK_MAX_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return _error(400, "Bad Content-Length.")
    if declared > limit:
        return _error(413, f"The body is larger than {limit} bytes.")
    try:
        body = request.read(limit + 1)
    except OSError:
        return _error(400, "The body could not be read.")
    if len(body) > limit:
        return _error(413, f"The body is larger than {limit} bytes.")
    try:
        delivery = webhook_deliver(
            public_id=public_id,
            body=body,
            timestamp=request.headers.get(TIMESTAMP_HEADER),
            signature=request.headers.get(SIGNATURE_HEADER),
        )
    except HookRefused as refused:
        response = _error(refused.status, str(refused))
        if refused.retry_after_s:
            response["Retry-After"] = str(max(refused.retry_after_s, 1))
        return response
    run = delivery.run
    return JsonResponse(
        {"run": run.pk, "status": run.status, "replayed": delivery.replayed}, status=202
    )


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": {"status": status, "message": message}}, status=status)
