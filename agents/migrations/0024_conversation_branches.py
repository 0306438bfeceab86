"""A conversation's messages as a tree (issue 36: edit and fork): each message names the one
it follows (`parent`), the conversation the tip of the branch it shows (`leaf`), a run the
user message it answered (`in_reply_to`); and a message's words for search (a generated
tsvector, GIN-indexed, filled for existing messages as the column is added).

Existing conversations become one branch in the order they were written (each message
follows the one before it by id), shown up to their last message. The tables keep their
tenant policies: added columns change no policy."""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.deletion
from django.db import migrations, models

THREADED = """
UPDATE agents_message AS m SET parent_id = earlier.previous
FROM (
    SELECT id, lag(id) OVER (PARTITION BY conversation_id ORDER BY id) AS previous
    FROM agents_message
) AS earlier
WHERE m.id = earlier.id AND earlier.previous IS NOT NULL;

UPDATE agents_conversation AS c SET leaf_id = last.id
FROM (SELECT conversation_id, max(id) AS id FROM agents_message GROUP BY conversation_id) AS last
WHERE c.id = last.conversation_id;

UPDATE agents_run AS r SET in_reply_to_id = asked.id
FROM (
    SELECT run_id, min(id) AS id FROM agents_message
    WHERE role = 'user' AND run_id IS NOT NULL GROUP BY run_id
) AS asked
WHERE r.id = asked.run_id;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0023_attachments"),
        ("tenancy", "0014_apikey_created_by_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="leaf",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="agents.message",
            ),
        ),
        migrations.AddField(
            model_name="message",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="children",
                to="agents.message",
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="in_reply_to",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="agents.message",
            ),
        ),
        migrations.AddField(
            model_name="message",
            name="search",
            field=models.GeneratedField(
                db_persist=True,
                expression=django.contrib.postgres.search.SearchVector("content", config="english"),
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["search"], name="agents_message_search"
            ),
        ),
        migrations.RunSQL(THREADED, migrations.RunSQL.noop, elidable=True),
        # Check the foreign keys just filled now, not at the commit: while their checks wait,
        # PostgreSQL refuses the indexes Django creates at the migration's end ("pending
        # trigger events"), on a database holding a conversation of two messages or more.
        # It changes no schema and no row (an edit of a landed migration, docs/operations.md).
        migrations.RunSQL("SET CONSTRAINTS ALL IMMEDIATE", migrations.RunSQL.noop),
    ]
