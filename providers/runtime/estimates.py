"""Token counts estimated from characters, where no provider has counted them: what a quota
holds for a call's input before the call, and what a call is counted at when its provider's
usage never comes (a stream cut, left or cancelled before it; a service that sends none).

About four characters a token, erring high for English text (a tokenizer per provider
would cost more than the call's bookkeeping is worth). An estimate never replaces a count
the provider gave.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from providers.runtime.types import ModelRequest, ToolResultMessage, Usage
from tools.runtime.tool import ToolCall

CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 1_600


def estimate_text_tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN + 1


def output_tokens_of(chars: int) -> int:
    """The tokens `chars` characters of a model's output are counted at (rounded up)."""
    return -(-max(chars, 0) // CHARS_PER_TOKEN)


def estimate_input_tokens(request: ModelRequest) -> int:
    """What `request` will likely cost in input tokens, from its characters (an estimate:
    settling replaces it with the provider's count)."""
    chars = len(request.system)
    images = 0
    for message in request.messages:
        if isinstance(message, ToolResultMessage):
            chars += len(message.content)
            continue
        chars += len(message.text)
        images += len(getattr(message, "images", ()))
        for call in getattr(message, "tool_calls", ()):
            chars += len(str(call.arguments)) + len(call.name)
    for tool in request.tools:
        chars += len(tool.name) + len(tool.description) + len(str(tool.input_schema))
    return chars // CHARS_PER_TOKEN + 1 + images * IMAGE_TOKENS


def delivered_chars(text: str, calls: Sequence[ToolCall]) -> int:
    """The characters of a model's output: its text, and each tool call's name and
    arguments (as JSON)."""
    return len(text) + sum(len(c.name) + len(json.dumps(c.arguments)) for c in calls)


def counted_usage(request: ModelRequest, text: str, calls: Sequence[ToolCall]) -> Usage:
    """What a call that gave `text` and `calls` is counted at when its provider said nothing
    of its usage: the input estimate of `request`, and its output's characters / 4."""
    output = output_tokens_of(delivered_chars(text, calls))
    return Usage(input_tokens=estimate_input_tokens(request), output_tokens=output)


def cut_usage(request: ModelRequest, text: str, calls: Sequence[ToolCall]) -> Usage:
    """What a call cut before its usage came (cancelled, broken off) is counted at: what it
    gave (`counted_usage`), or nothing if it gave nothing (it failed before it began)."""
    return counted_usage(request, text, calls) if text or calls else Usage()
