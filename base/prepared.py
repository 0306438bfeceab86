"""Statements PostgreSQL parses and plans once per connection: the few a run executes on
every chat (its insert, its claim, its checkpoints), whose text is the same each time and
whose values travel apart from it.

Django sends every statement with its values written into the text (client-side binding),
which PostgreSQL parses, rewrites (each table's row-level policy) and plans anew each time:
more than half of its CPU for a `/v1` chat (bench/api.py). A `prepared_cursor` sends the
values as parameters and has psycopg prepare the statement on the connection the first
time it runs there; afterwards only the values travel, and PostgreSQL reuses the parsed
statement and, once its plan proves generic, the plan.

It is still Django's cursor: the execute wrappers run (row-level security's setting,
tests' query capture) and errors are Django's. With DB_PREPARED_STATEMENTS off (a
connection pooler that does not keep a connection's prepared statements) the statements
are sent with their parameters, unprepared.
"""

from __future__ import annotations

from django.db import connection as default_connection
from django.db.backends.postgresql.base import ServerBindingCursor


class _Preparing(ServerBindingCursor):
    """Every statement prepared (on a connection whose `prepare_threshold` is set)."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)

    def _convert_query(self, query, vars=None):
        # Django's query log (DEBUG, tests' CaptureQueriesContext) reads the statement from
        # `_query`, which psycopg leaves unset when it executes a prepared one.
        self._query = super()._convert_query(query, vars)
        return self._query


def prepared_cursor(database=default_connection):
    """A cursor of `database` (Django's default connection) whose statements are prepared:
    use it for a statement of fixed text that runs often, with its values as `%s`
    parameters (each typed by its Python value, or a cast in the text)."""
    database.close_if_health_check_failed()
    database.ensure_connection()
    with database.wrap_database_errors:
        # (Django's own cursor(), with the cursor class chosen here.)
        return database._prepare_cursor(_Preparing(database.connection))
