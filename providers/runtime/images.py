"""Images users send to a model: what is accepted, checked before any provider sees it.

PNG, JPEG, GIF and WebP (what Anthropic and OpenAI both take), at most MAX_IMAGE_BYTES
each. The bytes must be what they claim (their signature is checked), so a data URL
labelled `image/png` cannot carry anything else to a provider.
"""

from __future__ import annotations

import base64
import binascii

from providers.runtime.types import Image

MAX_IMAGE_BYTES = 5 * 1024 * 1024  # Anthropic's limit per image
MAX_IMAGES = 20  # per request
MAX_REQUEST_IMAGE_BYTES = 10 * 1024 * 1024  # all of a request's: they are kept with its run
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


class ImageRefused(ValueError):
    """Not an image a model may be sent; the message says why, for the caller."""


def sniffed_type(data: bytes) -> str | None:
    for signature, media_type in _SIGNATURES:
        if data.startswith(signature):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_total(images: list[Image]) -> None:
    """All of a request's images together within MAX_REQUEST_IMAGE_BYTES."""
    total = sum(len(i.data) * 3 // 4 for i in images)
    if total > MAX_REQUEST_IMAGE_BYTES:
        limit = MAX_REQUEST_IMAGE_BYTES // (1024 * 1024)
        raise ImageRefused(f"A request's images may be at most {limit} MB together.")


def image_from_bytes(data: bytes) -> Image:
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageRefused(f"An image may be at most {MAX_IMAGE_BYTES // (1024 * 1024)} MB.")
    media_type = sniffed_type(data)
    if media_type is None:
        raise ImageRefused("Only PNG, JPEG, GIF and WebP images are supported.")
    return Image(media_type=media_type, data=base64.b64encode(data).decode("ascii"))


def image_from_data_url(url: str) -> Image:
    """`data:image/png;base64,...` as an Image (its declared type must match its bytes)."""
    header, comma, payload = url.partition(",")
    declared = header.removeprefix("data:").removesuffix(";base64")
    if not comma or not header.endswith(";base64") or declared not in MEDIA_TYPES:
        raise ImageRefused(
            "A data URL image must be `data:image/<png|jpeg|gif|webp>;base64,<data>`."
        )
    if len(payload) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise ImageRefused(f"An image may be at most {MAX_IMAGE_BYTES // (1024 * 1024)} MB.")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRefused("The data URL's base64 is not valid.") from None
    image = image_from_bytes(data)
    if image.media_type != declared:
        raise ImageRefused(f"The data URL says {declared} but holds {image.media_type}.")
    return image
