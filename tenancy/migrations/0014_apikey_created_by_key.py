"""`ApiKey.created_by_key`: the key that made a key. Keys made with a key before it existed
are found in the audit log (their `api_key.created` entry names the maker as its actor)
and get their maker and the person behind it, so their cap and their revocation follow
that person rather than treating them as the operator's keys."""

import django.db.models.deletion
from django.db import migrations, models


def makers_from_the_audit_log(apps, schema_editor):
    ApiKey = apps.get_model("tenancy", "ApiKey")
    AuditEntry = apps.get_model("tenancy", "AuditEntry")
    # Oldest first: a maker made by a key gets its person before the keys it made.
    for key in ApiKey.objects.filter(created_by__isnull=True).order_by("created_at", "pk"):
        entry = (
            AuditEntry.objects.filter(
                tenant_id=key.tenant_id,
                action="api_key.created",
                object_type="tenancy.apikey",
                object_id=str(key.pk),
                api_key__isnull=False,
            )
            .select_related("api_key")
            .first()
        )
        if entry is None:
            continue
        maker = ApiKey.objects.get(pk=entry.api_key_id)
        ApiKey.objects.filter(pk=key.pk).update(
            created_by_key_id=maker.pk, created_by_id=maker.created_by_id
        )


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0013_policies_bind_the_app_login")]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="created_by_key",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="keys_made",
                to="tenancy.apikey",
            ),
        ),
        migrations.RunPython(makers_from_the_audit_log, migrations.RunPython.noop),
        # Check the foreign keys just filled now, not at the commit: while their checks wait,
        # PostgreSQL refuses the indexes Django creates at the migration's end ("pending
        # trigger events"), on a database holding a key made by a key that acts for a person.
        # It changes no schema and no row (an edit of a landed migration, docs/operations.md).
        migrations.RunSQL("SET CONSTRAINTS ALL IMMEDIATE", migrations.RunSQL.noop),
    ]
