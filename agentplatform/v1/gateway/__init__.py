"""The gateway: a tenant's provider connections' models called through `/v1` with no agent
(`<connection>/<model>`, or a model alias). Its faces import this facade only (an
import-linter contract): forward.py (a call on its own API, or translated), call.py (a call
held, sent to its pairs, relayed, settled and recorded), translate.py (Messages <-> Chat
Completions), responses.py (/v1/responses), door.py (its own ASGI door)."""

from agentplatform.v1.gateway.call import flush_gateway_calls
from agentplatform.v1.gateway.door import with_gateway_door
from agentplatform.v1.gateway.forward import gateway_chat, gateway_messages, is_gateway_model
from agentplatform.v1.gateway.responses import gateway_responses

__all__ = [
    "flush_gateway_calls",
    "gateway_chat",
    "gateway_messages",
    "gateway_responses",
    "is_gateway_model",
    "with_gateway_door",
]
