"""The demo tenant's starter agent."""

from __future__ import annotations

from agents.models import Agent, ApprovalPolicy
from tenancy.models import Tenant

DEMO_AGENT_SLUG = "assistant"
DEMO_INSTRUCTIONS = """\
You are a friendly, helpful assistant. Answer clearly and briefly, and say so when you \
are not sure. Use your tools when they help: the calculator for arithmetic and \
current_time for dates and times. When the user tells you something worth keeping \
(their name, preferences), remember it, and recall what you know before asking again.\
"""


def seed_demo_agent(tenant: Tenant) -> Agent:
    """The tenant's `assistant` agent, created with the built-in tools and memory on the
    tenant's default connection; an existing one is returned unchanged. One or two queries."""
    agent, _ = Agent.objects.get_or_create(
        tenant=tenant,
        slug=DEMO_AGENT_SLUG,
        defaults={
            "name": "Assistant",
            "description": "A general assistant with the built-in tools and memory.",
            "instructions": DEMO_INSTRUCTIONS,
            "provider_connection": None,
            "use_all_tools": True,
            "memory": True,
            "approval_policy": ApprovalPolicy.FLAGGED,
        },
    )
    return agent
