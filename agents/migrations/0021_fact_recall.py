"""What hybrid recall needs of a fact: its words (a generated tsvector, GIN-indexed, filled
for existing facts as the column is added) and its meaning (a vector and the model that
made it; existing facts get theirs from the first recall of their user, agents/facts.py).
The table keeps its tenant policy: added columns change no policy."""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
import pgvector.django.vector
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0020_run_traceparent"),
        ("rag", "0001_vector_extension"),  # the `vector` type
    ]

    operations = [
        migrations.AddField(
            model_name="fact",
            name="embedder",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
        migrations.AddField(
            model_name="fact",
            name="embedding",
            field=pgvector.django.vector.VectorField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="fact",
            name="search",
            field=models.GeneratedField(
                db_persist=True,
                expression=django.contrib.postgres.search.SearchVector("text", config="english"),
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        migrations.AddIndex(
            model_name="fact",
            index=models.Index(fields=["tenant", "user"], name="agents_fact_tenant_user"),
        ),
        migrations.AddIndex(
            model_name="fact",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["search"], name="agents_fact_search"
            ),
        ),
    ]
