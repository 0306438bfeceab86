"""A conversation continued by reference: the turns an earlier run ended with, for the
faces whose clients send only the new turn and name the earlier answer
(`previous_response_id` on `/v1/responses`, `thread` on `/v1/messages`).

Only a top-level agent run the key may see (`agents.access.visible_runs`: a member's key
the runs it started, an admin's all of its tenant's) that was kept can be continued;
anything else is `unknown` (a 404: another tenant's or key's run is not told apart from
none). A run still at work, or parked for an approval, is `unfinished` (a 400).
"""

from __future__ import annotations

from typing import Any

from agentplatform.v1.endpoint import OpenAIError
from agents.runtime.spec import TERMINAL
from agents.runtime.state import RunState
from agents.selectors import stored_response_run
from providers.runtime.openai_adapter import to_openai_messages
from tenancy.authentication import ApiClient
from tenancy.policy import Principal


def conversation_so_far(
    client: ApiClient, run_id: int, *, unknown: OpenAIError, unfinished: OpenAIError
) -> list[dict[str, Any]]:
    """The turns run `run_id` ended with, as the model saw them (the platform's own tool
    calls and results included, its instructions not), as Chat Completions messages."""
    run = stored_response_run(principal=Principal.of_key(client.api_key), run_id=run_id)
    if run is None:
        raise unknown
    if run.status not in TERMINAL or not run.state:
        raise unfinished
    return to_openai_messages(RunState.from_dict(run.state).messages)
