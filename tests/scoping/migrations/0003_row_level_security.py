"""A tenant table made after tenancy 0005 puts itself behind the tenant policy like this."""

from django.db import migrations

from tenancy import rls


class Migration(migrations.Migration):
    dependencies = [("scoping", "0002_project_owner"), ("tenancy", "0005_row_level_security")]

    operations = [
        migrations.RunSQL(
            [*rls.policy_sql("scoping_project"), *rls.policy_sql("scoping_ticket")],
            migrations.RunSQL.noop,
        )
    ]
