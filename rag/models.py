"""Knowledge bases, their documents, and the chunks search reads (pgvector + full text).

Chunks keep their embedding in a `vector` column without fixed dimensions (each
knowledge base chooses its embedder), plus the `dimensions` it has: HNSW indexes are
partial expression indexes per common size (migration 0003), e.g.
``USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE dimensions = 384``, and
rag/search.py queries with that same expression so the planner picks them.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from pgvector.django import VectorField

from base.config_checks import ConfigObject
from tenancy.models import Tenant
from tools.context_providers import Domain, Health, ProviderHealth, domains_field

slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9_-]{0,49}$", "Lowercase letters, digits, _ and -."
)

MIN_CHUNK_TOKENS = 50
MAX_CHUNK_TOKENS = 2000
MAX_DIMENSIONS = 4000  # halfvec HNSW indexes go up to 4000 dimensions
# Sizes with an HNSW index: 0003, and 256 (the static model's) in 0005.
INDEXED_DIMENSIONS = (256, 384, 768, 1024, 1536, 3072)
HALFVEC_DIMENSIONS = frozenset({3072})  # over 2000 dims: indexed as halfvec


class Embedder(models.TextChoices):
    """`static` is the default: built in (no extra to install, the same on every server),
    and the fastest; `local` (MiniLM itself) ranks meaning better where it is installed."""

    STATIC = "static", "Static model (built in: distilled from all-MiniLM-L6-v2, 256 dimensions)"
    LOCAL = "local", "Local model (all-MiniLM-L6-v2, 384 dimensions; an optional install)"
    PROVIDER = "provider", "Provider embeddings (a connection's model)"
    LEXICAL = "lexical", "Full-text only (no embeddings)"


class Source(models.TextChoices):
    UPLOAD = "upload", "Uploaded file"
    TEXT = "text", "Pasted text"
    URL = "url", "Web page"


class DocumentStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    PROCESSING = "processing", "Processing"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


def default_knowledge_domains() -> list[str]:
    return [Domain.KNOWLEDGE.value, Domain.DOCUMENTS.value]


class KnowledgeBase(ConfigObject, models.Model):
    """A context provider (docs/context-providers.md): agents linked to it search it with
    `knowledge_search`. `domains` says what it covers; `health_*` is written by the
    periodic health check only (`rag.context_provider`)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="knowledge_bases")
    name = models.CharField(max_length=200)
    slug = models.CharField(max_length=50, validators=[slug_validator])
    description = models.TextField(blank=True)
    embedder = models.CharField(max_length=10, choices=Embedder.choices, default=Embedder.STATIC)
    provider_connection = models.ForeignKey(
        "providers.ProviderConnection",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="knowledge_bases",
        help_text="For provider embeddings: the connection whose embeddings endpoint is used.",
    )
    embedding_model = models.CharField(
        max_length=200,
        blank=True,
        help_text="For provider embeddings, e.g. text-embedding-3-small.",
    )
    dimensions = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Set by the embedder (empty for full-text only). For a provider, a value "
        "given here is requested from the model.",
    )
    chunk_size = models.PositiveSmallIntegerField(
        default=400,
        validators=[MinValueValidator(MIN_CHUNK_TOKENS), MaxValueValidator(MAX_CHUNK_TOKENS)],
        help_text="Tokens per chunk (estimated: words and punctuation marks).",
    )
    chunk_overlap = models.PositiveSmallIntegerField(
        default=60, help_text="Tokens repeated from the previous chunk; smaller than the size."
    )
    agents = models.ManyToManyField("agents.Agent", related_name="knowledge_bases", blank=True)
    domains = domains_field(default=default_knowledge_domains)
    health_status = models.CharField(
        max_length=10, choices=Health.choices, default=Health.UNKNOWN, editable=False
    )
    health_reason = models.TextField(blank=True, editable=False)
    health_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="knowledge_base_slug_unique"),
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def health(self) -> ProviderHealth:
        return ProviderHealth(self.health_status, self.health_reason, self.health_checked_at)

    def get_domains_display(self) -> list[str]:
        return [Domain(d).label for d in self.domains or () if d in Domain.values]

    @property
    def embeds(self) -> bool:
        """Whether chunks get vectors (every embedder but full-text only)."""
        return self.embedder != Embedder.LEXICAL

    def clean(self) -> None:
        """The knowledge base's own fields and tenant; the chunking, the embedder's
        connection and model are the configuration compiler's, checked over the tenant's
        configuration (`ConfigObject`)."""
        errors: dict[str, str] = {}
        if self.embedder == Embedder.PROVIDER:
            connection = self.provider_connection
            if connection is not None and connection.tenant_id != self.tenant_id:
                errors["provider_connection"] = "Choose one of this organisation's connections."
        if self.embedder == Embedder.LEXICAL and self.dimensions is not None:
            errors["dimensions"] = "Full-text knowledge bases have no embedding dimensions."
        elif self.dimensions is not None and not 1 <= self.dimensions <= MAX_DIMENSIONS:
            errors["dimensions"] = f"Between 1 and {MAX_DIMENSIONS}."
        if errors:
            raise ValidationError(errors)


class Document(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rag_documents")
    knowledge_base = models.ForeignKey(
        KnowledgeBase, on_delete=models.CASCADE, related_name="documents"
    )
    title = models.CharField(max_length=300, blank=True)
    source = models.CharField(max_length=10, choices=Source.choices)
    url = models.URLField(max_length=2000, blank=True)
    filename = models.CharField(max_length=255, blank=True)
    content_type = models.CharField(max_length=200, blank=True)
    content = models.BinaryField(
        blank=True, default=bytes, help_text="The original bytes (empty for a URL: fetched)."
    )
    checksum = models.CharField(max_length=64, blank=True, help_text="sha256 of the source bytes.")
    status = models.CharField(
        max_length=12, choices=DocumentStatus.choices, default=DocumentStatus.PENDING
    )
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    error = models.TextField(blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    token_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["knowledge_base", "status"], name="rag_document_kb_status")]

    def __str__(self) -> str:
        return self.title or self.filename or self.url or f"Document {self.pk}"

    def clean(self) -> None:
        limit = settings.RAG_MAX_DOCUMENT_BYTES
        if self.content is not None and len(self.content) > limit:
            raise ValidationError(
                {"content": f"The document is larger than the limit of {limit // 2**20} MiB."}
            )
        if self.source == Source.URL and not self.url:
            raise ValidationError({"url": "A web page document needs its URL."})


class Chunk(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rag_chunks")
    knowledge_base = models.ForeignKey(
        KnowledgeBase, on_delete=models.CASCADE, related_name="chunks"
    )
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    ordinal = models.PositiveIntegerField()
    text = models.TextField()
    token_count = models.PositiveIntegerField(default=0)
    heading_path = models.CharField(max_length=1000, blank=True)
    page = models.PositiveIntegerField(null=True, blank=True)
    embedding = VectorField(null=True, blank=True)
    dimensions = models.PositiveSmallIntegerField(null=True, blank=True)
    # Filled by Postgres on insert (a stored generated column): headings weigh more.
    search = models.GeneratedField(
        expression=SearchVector("heading_path", weight="A", config="english")
        + SearchVector("text", weight="B", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    class Meta:
        ordering = ["document_id", "ordinal"]
        constraints = [
            models.UniqueConstraint(
                fields=["document", "ordinal"], name="rag_chunk_ordinal_unique"
            ),
        ]
        indexes = [
            GinIndex(fields=["search"], name="rag_chunk_search"),
            models.Index(fields=["tenant", "knowledge_base"], name="rag_chunk_tenant_kb"),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.ordinal}"
