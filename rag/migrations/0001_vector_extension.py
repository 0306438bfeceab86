from django.core.management.base import CommandError
from django.db import DatabaseError, migrations
from pgvector.django import VectorExtension

_INSUFFICIENT_PRIVILEGE = "42501"


class VectorExtensionOrInstructions(VectorExtension):
    """`CREATE EXTENSION vector` when it is missing, which needs a superuser (pgvector is
    not a trusted extension). A database user who may not create it gets a CommandError
    naming the statement to run, not a psycopg traceback; where the extension already
    exists nothing is created, so no special rights are needed. Costs two catalog queries."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        connection = schema_editor.connection
        if (
            connection.vendor != "postgresql"
            or schema_editor.collect_sql  # sqlmigrate: show the statement, run nothing
            or self.extension_exists(schema_editor, self.name)
        ):
            super().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_user, current_database(), "
                "EXISTS (SELECT FROM pg_available_extensions WHERE name = %s)",
                [self.name],
            )
            user, database, available = cursor.fetchone()
        if not available:
            raise CommandError(
                f"The PostgreSQL server of database {database!r} has no {self.name} "
                "extension: install pgvector on it (https://github.com/pgvector/pgvector), "
                "then migrate again."
            )
        try:
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        except DatabaseError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != _INSUFFICIENT_PRIVILEGE:
                raise
            raise CommandError(
                f"The {self.name} extension is not installed and user {user!r} may not "
                f"create it: run `CREATE EXTENSION {self.name};` as a superuser in database "
                f"{database!r} once, then migrate again."
            ) from exc


class Migration(migrations.Migration):
    """pgvector first, so every later migration may use vector columns and HNSW indexes."""

    initial = True
    dependencies = []
    operations = [VectorExtensionOrInstructions()]
