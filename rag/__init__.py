"""Knowledge bases: documents, chunks (pgvector) and search, exposed to agents as tools."""
