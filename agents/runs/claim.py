"""Claiming a run: take its lease and read what executing it needs, in one statement.

A run is claimable while queued, or while running under an expired lease (its worker died).
The statement takes the lease (the database's clock, so workers on skewed hosts agree on
expiry), and returns the run with its tenant, its agent and the agent's provider connection
and the number of its last stored event.

Why SQL of our own: through the ORM this was an UPDATE and a SELECT with four joins, 9 ms of
the 40 ms a chat's first token took on top of the provider (bench/api.py's breakdown);
most of it was the ORM building the two queries and PostgreSQL planning the joins. The
statement is built once per process from the models' fields, so it follows the models.
"""

from __future__ import annotations

import logging
from functools import cache, lru_cache
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models

from agents.models import Agent, Run, RunEvent
from agents.runtime.spec import RunStatus
from base.prepared import prepared_cursor
from providers.models import ProviderConnection
from tenancy.models import Tenant

logger = logging.getLogger(__name__)


def lease_seconds() -> float:
    """How long a claim holds a run without being renewed (settings.RUN_LEASE_S, 30)."""
    return float(getattr(settings, "RUN_LEASE_S", 30))


# Each model read, with the alias its columns carry in the statement.
_READ = ((Run, "c"), (Tenant, "t"), (Agent, "a"), (ProviderConnection, "p"))


def claim(run_id: int, owner: str, lease_s: float) -> Run | None:
    """The claimed run (its tenant, agent and agent's connection loaded; `stored_seq` its
    last stored event's number), or None if it is not claimable."""
    with prepared_cursor(connections[DEFAULT_DB_ALIAS]) as cursor:
        cursor.execute(
            _statement(),
            [
                RunStatus.RUNNING.value,
                owner,
                lease_s,
                run_id,
                RunStatus.QUEUED.value,
                RunStatus.RUNNING.value,
            ],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    values = iter(row)
    stored_seq = next(values)
    raw = {model: [next(values) for _ in model._meta.concrete_fields] for model, _ in _READ}
    run = instance_of_row(Run, raw[Run])
    run.stored_seq = stored_seq
    try:
        tenant, agent = instance_of_row(Tenant, raw[Tenant]), instance_of_row(Agent, raw[Agent])
        provider = instance_of_row(ProviderConnection, raw[ProviderConnection])
    except Exception:
        # A value that cannot be read (a secret under another key): the run is claimed, so
        # leave them to be loaded where executing it fails cleanly (retried, then failed).
        logger.warning("run %s: its agent or connection could not be read", run.pk)
        return run
    Run._meta.get_field("tenant").set_cached_value(run, tenant)
    Run._meta.get_field("agent").set_cached_value(run, agent)
    if agent is not None:
        Agent._meta.get_field("provider_connection").set_cached_value(agent, provider)
    return run


def instance_of_row(model: type[models.Model], raw: list[Any]) -> Any:
    """The row's columns of `model` (`column_list`'s, in its order) as an instance (None for
    a missing join), each value converted as the ORM would (encrypted text, JSON)."""
    if raw[0] is None:  # (the first column is the primary key)
        return None
    attnames, converters = _columns(model)
    db = connections[DEFAULT_DB_ALIAS]  # (not the proxy: resolved once, not per converter)
    converted: list[Any] = []
    for field_converters, value in zip(converters, raw, strict=True):
        for converter in field_converters:
            value = converter(value, None, db)
        converted.append(value)
    return model.from_db(DEFAULT_DB_ALIAS, attnames, converted)


@cache
def _columns(model: type[models.Model]) -> tuple[list[str], list[list[Any]]]:
    """The model's attribute names and each field's converters, in column order."""
    fields = model._meta.concrete_fields
    return [f.attname for f in fields], [f.get_db_converters(connection) for f in fields]


def column_list(model: type[models.Model], alias: str) -> str:
    """The model's columns, as `instance_of_row` takes them: `alias."column", ...`."""
    return ", ".join(f'{alias}."{f.column}"' for f in model._meta.concrete_fields)


@lru_cache(maxsize=1)
def _statement() -> str:

    run, tenant = Run._meta.db_table, Tenant._meta.db_table
    agent, provider = Agent._meta.db_table, ProviderConnection._meta.db_table
    events = RunEvent._meta.db_table
    return (
        f"WITH c AS (UPDATE {run} SET status = %s, lease_owner = %s, "  # noqa: S608 (our tables)
        "lease_expires_at = STATEMENT_TIMESTAMP() + %s * interval '1 second', "
        "attempts = attempts + 1, started_at = COALESCE(started_at, STATEMENT_TIMESTAMP()) "
        "WHERE id = %s AND (status = %s OR (status = %s AND lease_expires_at < "
        "STATEMENT_TIMESTAMP())) RETURNING *) "
        f"SELECT COALESCE((SELECT e.seq FROM {events} e WHERE e.run_id = c.id "
        "ORDER BY e.seq DESC LIMIT 1), 0), "
        + ", ".join(column_list(model, alias) for model, alias in _READ)
        + f" FROM c JOIN {tenant} t ON t.id = c.tenant_id "
        f"LEFT JOIN {agent} a ON a.id = c.agent_id "
        f"LEFT JOIN {provider} p ON p.id = a.provider_connection_id"
    )
