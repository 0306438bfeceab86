"""Remote agents' health, checked periodically (`agents.check_remote_agents`, Celery beat
every REMOTE_AGENT_HEALTH_S) and shown on the agent's pages and in REST: its server's
`GET /health`, or its command's answer to {"type": "health"}
(agents/runtime/remote_transport.py)."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone

from agents.models import Agent
from agents.runtime.remote_transport import command_health, http_health
from agents.specs import remote_command_argv
from tenancy import rls
from tools.loader import egress_client

logger = logging.getLogger(__name__)


def check_remote_agent(agent: Agent) -> tuple[bool, str]:
    """Check one remote agent now and record the answer on it."""
    if agent.remote_command:
        argv = remote_command_argv(agent.remote_command)
        healthy, detail = async_to_sync(command_health)(
            agent.remote_command, argv, user=settings.REMOTE_AGENT_COMMAND_USER
        )
    else:
        egress = egress_client(tuple(settings.EGRESS_ALLOWLIST))
        healthy, detail = async_to_sync(http_health)(
            agent.remote_url, egress, token=agent.remote_token or None
        )
    Agent.objects.filter(pk=agent.pk).update(
        remote_healthy=healthy,
        remote_health_detail=detail[:300],
        remote_health_checked_at=timezone.now(),
    )
    return healthy, detail


def check_remote_agents() -> int:
    """Check every active remote agent of every tenant, each in its tenant's scope."""
    with rls.owner():  # which agents, across tenants
        found = list(
            Agent.objects.filter(kind="remote", active=True).values_list("pk", "tenant_id")
        )
    by_tenant: dict[int, list[int]] = {}
    for pk, tenant_id in found:
        by_tenant.setdefault(tenant_id, []).append(pk)
    for tenant_id, pks in by_tenant.items():
        with rls.tenant_scope(tenant_id):
            for agent in Agent.objects.filter(pk__in=pks):
                try:  # one agent's trouble never stops the others' checks
                    check_remote_agent(agent)
                except Exception:
                    logger.exception("remote agent %s: its health check failed", agent.pk)
    return len(found)
