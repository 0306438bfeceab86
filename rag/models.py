# Models arrive with the knowledge-base issue; migration 0001 enables pgvector.
