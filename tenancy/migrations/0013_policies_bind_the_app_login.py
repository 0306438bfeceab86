"""The tenant policy again on every tenant table, in the form that admits every tenant for
`app.tenant_ids = '*'` (rls.owner(): the processes now log in as the app role, and act for
every tenant through the setting instead of switching back to the owner)."""

from django.db import migrations

from tenancy import rls


def reinstall_policies(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        for table in rls.tenant_tables(apps):
            for statement in rls.policy_sql(table):
                cursor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("tenancy", "0012_oauth_sign_in_method"),
        ("agents", "0020_run_traceparent"),
        ("tools", "0008_mcp_tool_examples"),
        ("providers", "0003_model_alias"),
        ("rag", "0005_static_embedder"),
    ]

    operations = [migrations.RunPython(reinstall_policies, migrations.RunPython.noop)]
