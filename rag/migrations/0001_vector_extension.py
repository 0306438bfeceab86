from django.db import migrations
from pgvector.django import VectorExtension


class Migration(migrations.Migration):
    """pgvector first, so every later migration may use vector columns and HNSW indexes."""

    initial = True
    dependencies = []
    operations = [VectorExtension()]
