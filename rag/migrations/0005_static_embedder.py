"""The static embedder (rag/runtime/static_embedder.py), the default of new knowledge bases,
and an HNSW index for its 256 dimensions, partial like 0003's. Existing knowledge bases
keep their embedder."""

from django.db import migrations, models

INDEX = (
    "CREATE INDEX IF NOT EXISTS rag_chunk_hnsw_256 ON rag_chunk USING hnsw "
    "((embedding::vector(256)) vector_cosine_ops) WHERE dimensions = 256"
)


class Migration(migrations.Migration):
    dependencies = [
        ("rag", "0004_knowledge_base_domains_and_health"),
    ]

    operations = [
        migrations.AlterField(
            model_name="knowledgebase",
            name="embedder",
            field=models.CharField(
                choices=[
                    (
                        "static",
                        "Static model (built in: distilled from all-MiniLM-L6-v2, 256 dimensions)",
                    ),
                    (
                        "local",
                        "Local model (all-MiniLM-L6-v2, 384 dimensions; an optional install)",
                    ),
                    ("provider", "Provider embeddings (a connection's model)"),
                    ("lexical", "Full-text only (no embeddings)"),
                ],
                default="static",
                max_length=10,
            ),
        ),
        migrations.RunSQL(INDEX, "DROP INDEX IF EXISTS rag_chunk_hnsw_256"),
    ]
