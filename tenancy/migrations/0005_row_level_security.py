"""Row-level security: the app role (its login and privileges), and a tenant policy on every
table with a `tenant` foreign key (tenancy/rls.py says how the processes use them).

Late in the graph (after the latest migration of every app) so that every tenant table
exists. A tenant table added later calls `rls.policy_sql` in its own migration (see
tests/scoping/migrations/0003_row_level_security.py); tests/tenancy/test_rls.py fails for a
tenant table without the policy. Tables made later are granted to the app role by the
default privileges set here.
"""

from django.conf import settings
from django.core.management.base import CommandError
from django.db import migrations

from tenancy import rls


def create_app_role(apps, schema_editor) -> None:
    """The login of the web and worker processes (tenancy/app_login.py, which
    every later migrate runs again)."""
    from tenancy import app_login

    try:
        app_login.ensure(schema_editor.connection)
    except CommandError:
        if settings.DB_ROW_LEVEL_SECURITY:
            raise
        # Nobody logs in as it; the policies below still stand.


def enable_policies(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        for table in rls.tenant_tables(apps):
            for statement in rls.policy_sql(table):
                cursor.execute(statement)


def disable_policies(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        for table in rls.tenant_tables(apps):
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
