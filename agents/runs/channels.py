"""Run events: stored append-only with a sequence number and published live on Redis by
the recorder (agents/runs/writer.py); followed by the reader (agents/runs/reader.py). What
both sides share is here."""

from __future__ import annotations

import redis

from agents.models import Run
from base.versions import shared_redis

TERMINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})
# The events that end an execution's attempt: the run finished, or parked for a human. They
# are stored only with the outcome (the run's status, output, usage, approvals) and
# published only once that has committed, so a follower that sees one reads the same ending
# on the record (agents.runs.writer).
ENDING_EVENTS = TERMINAL_EVENTS | {"approval.required"}


def channel(run: Run) -> str:
    return f"ap:run:{run.pk}:{run.correlation_id}:events"


def publisher() -> redis.Redis:
    return shared_redis()
