"""What an approval card's form posts as edited arguments: the textarea comes prefilled with
the call's arguments, so text left as it was is no edit."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError

from agents.models import Approval


def edited_arguments(posted: str | None, approval: Approval) -> dict[str, Any] | None:
    """The edited arguments, or None when the text is empty or unchanged. ValidationError
    for text that is not a JSON object (the approval is left as it is)."""
    text = (posted or "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        raise ValidationError("Edited arguments must be valid JSON.") from None
    if not isinstance(value, dict):
        raise ValidationError("Edited arguments must be a JSON object.")
    return None if value == approval.arguments else value
