"""Steering a running loop: messages a person sends while a run works, appended as user
turns before the loop's next model call (agents/runtime/loop.py). The caller implements the
interface (agents/runs/steering.py: PostgreSQL holds the messages, a Redis flag says some
wait); the loop asks once per round, in the round trip of its cancel check (`poll`), and
reads them (`take`) only when some wait."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Steer:
    id: int
    text: str


class Steering(Protocol):
    async def poll(self) -> tuple[bool, bool]:
        """(a stop was asked, steering messages wait): one round trip for both."""
        ...

    async def take(self, known: Sequence[int]) -> list[Steer]:
        """The run's steering messages whose ids are not in `known` (those applied
        already), oldest first. A read, only when `poll` said some wait (or on resume)."""
        ...
