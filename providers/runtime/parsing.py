from __future__ import annotations

import json

from providers.runtime.errors import ModelBehaviorError
from tools.runtime.tool import ToolCall


def parse_call(call_id: str, name: str, raw: str) -> ToolCall:
    """A tool call from the model's argument text; ModelBehaviorError unless a JSON object."""
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise ModelBehaviorError(
            f"arguments for {name} are not a JSON object: {raw[:200]}",
            call_id=call_id,
            name=name,
            raw=raw,
        )
    return ToolCall(id=call_id, name=name, arguments=arguments)
