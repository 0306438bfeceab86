"""The ModelAdapter protocol every provider implements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

from providers.runtime.types import ModelRequest, ModelResponse, StreamEvent


@runtime_checkable
class ModelAdapter(Protocol):
    provider: str  # "anthropic", "openai", "offline", ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Yields text deltas, whole tool calls, usage, and finally Done(response)."""
        ...


@runtime_checkable
class Embedder(Protocol):
    async def embed(
        self, texts: Sequence[str], *, model: str, dimensions: int | None = None
    ) -> list[list[float]]: ...
