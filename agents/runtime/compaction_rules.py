"""What an agent's or crew's compaction settings may be, without Django: `Agent.clean`,
`Crew.clean` and the configuration document (its schema's bounds) ask here, so a form,
REST, the admin and a document agree (docs/agents.md, "Long conversations")."""

from __future__ import annotations

# Tokens of conversation history above which a run's older turns are summarised: below
# the minimum a summary would be about as long as what it replaces.
MIN_THRESHOLD_TOKENS = 1_000
MAX_THRESHOLD_TOKENS = 2_000_000


def threshold_problem(value: int | None) -> str:
    """Why `value` cannot be a compaction threshold; "" when it can (None: the default)."""
    if value is None:
        return ""
    if not MIN_THRESHOLD_TOKENS <= value <= MAX_THRESHOLD_TOKENS:
        return f"Between {MIN_THRESHOLD_TOKENS:,} and {MAX_THRESHOLD_TOKENS:,} tokens, or empty."
    return ""
