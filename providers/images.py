"""Images given by URL, fetched through the guarded egress (the tenant tools' policy:
no private addresses unless allow-listed, redirects re-checked, a size cap and a deadline)
before a run starts, so a bad one is the caller's 400 and no provider fetches anything."""

from __future__ import annotations

from django.conf import settings

from providers.runtime.images import MAX_IMAGE_BYTES, ImageRefused, image_from_bytes
from providers.runtime.types import Image
from tools.loader import egress_client
from tools.runtime.egress import EgressError, ResponseTooLarge

FETCH_TIMEOUT_S = 10.0


async def fetch_image(url: str) -> Image:
    client = egress_client(tuple(settings.EGRESS_ALLOWLIST))
    try:
        response = await client.request(
            "GET", url, timeout_s=FETCH_TIMEOUT_S, max_bytes=MAX_IMAGE_BYTES
        )
    except ResponseTooLarge:
        raise ImageRefused(
            f"The image at {url} is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MB."
        ) from None
    except EgressError as exc:  # (its text is ours, fit for the caller)
        raise ImageRefused(f"The image at {url} could not be fetched: {exc}") from None
    if response.status_code != 200:
        raise ImageRefused(f"The image at {url} answered HTTP {response.status_code}.")
    return image_from_bytes(response.content)
