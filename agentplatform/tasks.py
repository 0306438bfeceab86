from __future__ import annotations

from celery import shared_task


@shared_task(name="agentplatform.ping")
def ping() -> str:
    """Proves a worker consumes the queue; /healthz and the tests call it."""
    return "pong"


@shared_task(name="agentplatform.database_role")
def database_role() -> list[str]:
    """The role this worker's queries run as and the one it logged in as: the app role both
    when row-level security is on (tests/tenancy/test_rls.py asks)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user, session_user")
        return list(cursor.fetchone())
