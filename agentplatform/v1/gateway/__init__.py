"""The gateway: a tenant's provider connections' models called through `/v1` with no agent
(`<connection>/<model>`, or a model alias). The faces import this facade only (an
import-linter contract). One module per endpoint: chat.py (/v1/chat/completions), messages.py
(/v1/messages), responses.py (/v1/responses), each passed through on the connection's own API
(forward.py) or translated; call.py (a call on every endpoint: held, sent to its pairs,
relayed, settled and recorded); door.py (its own ASGI door in front of Django)."""

from agentplatform.v1.gateway.call import flush_gateway_calls
from agentplatform.v1.gateway.chat import gateway_chat
from agentplatform.v1.gateway.door import with_gateway_door
from agentplatform.v1.gateway.forward import is_gateway_model
from agentplatform.v1.gateway.messages import gateway_messages
from agentplatform.v1.gateway.responses import gateway_responses

__all__ = [
    "flush_gateway_calls",
    "gateway_chat",
    "gateway_messages",
    "gateway_responses",
    "is_gateway_model",
    "with_gateway_door",
]
