"""One HNSW index per common embedding size: partial expression indexes, because the
`embedding` column has no fixed dimensions. rag/search.py queries with the same
expression and predicate (`(embedding::vector(384)) <=> q ... WHERE dimensions = 384`).
Over 2000 dimensions pgvector indexes only halfvec, so 3072 is cast to halfvec(3072)."""

from django.db import migrations

VECTOR_DIMENSIONS = (384, 768, 1024, 1536)
HALFVEC_DIMENSIONS = (3072,)


def create(name: str, expression: str, ops: str, dimensions: int) -> str:
    return (
        f"CREATE INDEX IF NOT EXISTS {name} ON rag_chunk USING hnsw (({expression}) {ops}) "
        f"WHERE dimensions = {dimensions}"
    )


operations = []
for d in VECTOR_DIMENSIONS:
    operations.append(
        migrations.RunSQL(
            create(f"rag_chunk_hnsw_{d}", f"embedding::vector({d})", "vector_cosine_ops", d),
            f"DROP INDEX IF EXISTS rag_chunk_hnsw_{d}",
        )
    )
for d in HALFVEC_DIMENSIONS:
    operations.append(
        migrations.RunSQL(
            create(f"rag_chunk_hnsw_{d}", f"embedding::halfvec({d})", "halfvec_cosine_ops", d),
            f"DROP INDEX IF EXISTS rag_chunk_hnsw_{d}",
        )
    )


class Migration(migrations.Migration):
    dependencies = [("rag", "0002_knowledge_bases")]
    operations = operations
