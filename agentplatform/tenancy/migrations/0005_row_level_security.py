"""Row-level security: the app role, its privileges, and a tenant policy on every table with
a `tenant` foreign key (agentplatform/tenancy/rls.py says how the processes use them).

Late in the graph (after the latest migration of every app) so that every tenant table
exists. A tenant table added later calls `rls.policy_sql` in its own migration (see
tests/scoping/migrations/0003_row_level_security.py); tests/tenancy/test_rls.py fails for a
tenant table without the policy. Tables made later are granted to the app role by the
default privileges set here.
"""

from django.conf import settings
from django.core.management.base import CommandError
from django.db import DatabaseError, migrations

from agentplatform.tenancy import rls


def tenant_tables(apps) -> list[str]:
    return sorted(
        model._meta.db_table
        for model in apps.get_models()
        if any(
            field.name == "tenant"
            and field.many_to_one
            and field.related_model._meta.label_lower == "tenancy.tenant"
            for field in model._meta.get_fields()
        )
    )


ROLE_SQL = """
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
    CREATE ROLE {role} NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
  END IF;
  IF NOT pg_has_role(current_user, '{role}', 'MEMBER') THEN
    EXECUTE format('GRANT {role} TO %I', current_user);
  END IF;
EXCEPTION WHEN duplicate_object THEN NULL;  -- another session created it meanwhile
END $$;
GRANT USAGE ON SCHEMA public TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {role};
"""


def create_app_role(apps, schema_editor) -> None:
    role = settings.DB_APP_ROLE
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        user = cursor.fetchone()[0]
        cursor.execute("SAVEPOINT app_role")
        try:
            cursor.execute(ROLE_SQL.format(role=role))
        except DatabaseError as exc:  # insufficient_privilege: no CREATEROLE, or no ADMIN on it
            cursor.execute("ROLLBACK TO SAVEPOINT app_role")
            if not settings.DB_ROW_LEVEL_SECURITY:
                return  # nobody assumes it; the policies below still stand
            raise CommandError(  # migrate prints it without a traceback
                f"The database user {user!r} cannot create or grant the role {role!r} that "
                "the web and worker processes assume for row-level security ({exc}). Ask a "
                "database administrator to run:\n"
                f"    CREATE ROLE {role} NOLOGIN;\n"
                f"    GRANT {role} TO {user};\n"
                "then migrate again (or set DB_ROW_LEVEL_SECURITY=false)."
            ) from exc


def enable_policies(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        for table in tenant_tables(apps):
            for statement in rls.policy_sql(table):
                cursor.execute(statement)


def disable_policies(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        for table in tenant_tables(apps):
            cursor.execute(f'DROP POLICY IF EXISTS {rls.POLICY_NAME} ON "{table}"')
            cursor.execute(f'ALTER TABLE "{table}" DISABLE ROW LEVEL SECURITY')


class Migration(migrations.Migration):
    dependencies = [
        ("tenancy", "0004_audit_log"),
        ("agents", "0006_approval_authority"),
        ("tools", "0003_mcp_server_connection"),
        ("providers", "0001_initial"),
        ("rag", "0003_hnsw_indexes"),
        ("auth", "__latest__"),
        ("contenttypes", "__latest__"),
        ("sessions", "__latest__"),
        ("admin", "__latest__"),
        ("guardian", "__latest__"),
    ]

    operations = [
        migrations.RunPython(create_app_role, migrations.RunPython.noop),
        migrations.RunPython(enable_policies, disable_policies),
    ]
