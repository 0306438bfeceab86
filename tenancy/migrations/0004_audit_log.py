"""The audit log, and the database wall that keeps it append-only.

The trigger refuses every UPDATE and DELETE of tenancy_auditentry, with two exceptions
that Django's own deletions need:
- UPDATE that only sets user_id or api_key_id to NULL: deleting a user or an API key
  (their foreign keys are on_delete=SET_NULL); actor_label still says who it was.
- DELETE of the entries of a tenant being deleted: the tenant's pre_delete receiver
  (tenancy/records/audit.py) adds its id to the transaction-local setting
  `app.audit_purge_tenants` in the same transaction as the cascade. Transaction-local,
  and naming the tenant, so it opens nothing else and nothing after the commit.
This guards against the application (a bug, a stray queryset); a database role that owns
the table can still drop the trigger.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

APPEND_ONLY = r"""
CREATE FUNCTION tenancy_auditentry_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (to_jsonb(NEW) - 'user_id' - 'api_key_id') = (to_jsonb(OLD) - 'user_id' - 'api_key_id')
           AND (NEW.user_id IS NULL OR NEW.user_id = OLD.user_id)
           AND (NEW.api_key_id IS NULL OR NEW.api_key_id = OLD.api_key_id) THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'audit entries are append-only: UPDATE refused'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.tenant_id::text = ANY (string_to_array(
        coalesce(current_setting('app.audit_purge_tenants', true), ''), ','
    )) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit entries are append-only: DELETE refused'
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER tenancy_auditentry_append_only
    BEFORE UPDATE OR DELETE ON tenancy_auditentry
    FOR EACH ROW EXECUTE FUNCTION tenancy_auditentry_append_only();
"""
DROP_APPEND_ONLY = """
DROP TRIGGER IF EXISTS tenancy_auditentry_append_only ON tenancy_auditentry;
DROP FUNCTION IF EXISTS tenancy_auditentry_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("tenancy", "0003_policy_keys_groups"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("signin.succeeded", "Signed in"),
                            ("signin.failed", "Sign-in failed"),
                            ("config.created", "Configuration created"),
                            ("config.changed", "Configuration changed"),
                            ("config.deleted", "Configuration deleted"),
                            ("grant.added", "Permission granted"),
                            ("grant.removed", "Permission removed"),
                            ("member.added", "Member added"),
                            ("member.changed", "Member's role changed"),
                            ("member.removed", "Member removed"),
                            ("api_key.created", "API key created"),
                            ("api_key.revoked", "API key revoked"),
                            ("approval.decided", "Approval decided"),
                            ("run.started_by_key", "Run started with an API key"),
                        ],
                        max_length=40,
                    ),
                ),
                ("actor_label", models.CharField(blank=True, max_length=200)),
                ("object_type", models.CharField(blank=True, max_length=100)),
                ("object_id", models.CharField(blank=True, max_length=100)),
                ("object_repr", models.CharField(blank=True, max_length=200)),
                ("changes", models.JSONField(blank=True, default=dict)),
                ("ip", models.GenericIPAddressField(blank=True, null=True)),
                ("details", models.JSONField(blank=True, default=dict)),
                (
                    "api_key",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="tenancy.apikey",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="audit_entries",
                        to="tenancy.tenant",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name": "audit entry",
                "verbose_name_plural": "audit log",
                "ordering": ["-at", "-id"],
                "indexes": [
                    models.Index(fields=["tenant", "-at"], name="audit_tenant_at"),
                    models.Index(fields=["tenant", "-id"], name="audit_tenant_id"),
                ],
            },
        ),
        migrations.RunSQL(APPEND_ONLY, DROP_APPEND_ONLY),
    ]
