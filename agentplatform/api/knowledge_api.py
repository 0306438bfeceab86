"""Knowledge bases: CRUD, their documents (upload, pasted text or a URL; progress while
ingesting; re-ingest; delete) and search.

Knowledge bases are addressed by slug (like agents), or by numeric id; documents by id.
Another tenant's slugs and ids answer 404. Writes go through `rag.services`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import (
    NOT_FOUND_EXAMPLE,
    CleanModelSerializer,
    StrictSerializer,
    TenantCrudViewSet,
    TenantViewSet,
    crud_schema,
    path_id,
    path_text,
    query_text,
)
from agentplatform.api.schema import ERRORS, error
from agentplatform.api.serializers import (
    MAX_DESCRIPTION,
    ProviderHealthSerializer,
    TenantPrimaryKeyField,
)
from agentplatform.api.tenant import request_user_or_key
from agents import quotas
from agents.models import Agent
from agents.selectors import agents_named
from providers.models import ProviderConnection
from rag import selectors, services
from rag.models import Document, KnowledgeBase
from rag.runtime.embeddings import EmbeddingError
from rag.search import MAX_TOP_K, MODES
from tenancy.models import Tenant
from tenancy.policy import Action
from tools.context_providers import Domain

MAX_QUERY = 2_000


def max_document_bytes() -> int:
    """The largest document (upload or pasted text) accepted, in bytes."""
    return settings.RAG_MAX_DOCUMENT_BYTES


class TooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "The document is too large."


class EmbedderFailed(exceptions.APIException):
    """The knowledge base's embedder could not embed the query: its configuration (the
    provider connection, the model) needs a tenant admin's attention."""

    status_code = status.HTTP_502_BAD_GATEWAY
    default_code = "embedder_failed"
    default_detail = "The knowledge base's embedder failed."


# -- serializers -------------------------------------------------------------------------
class AgentSlugsField(serializers.ListField):
    """The agents that search this knowledge base, by slug."""

    def get_attribute(self, knowledge_base: KnowledgeBase) -> list[str]:
        return selectors.knowledge_base_agent_slugs(knowledge_base)


class KnowledgeBaseSerializer(CleanModelSerializer):
    provider_connection = TenantPrimaryKeyField(
        queryset=ProviderConnection.objects.all(),
        required=False,
        allow_null=True,
        help_text="For the `provider` embedder: id of one of this tenant's connections; "
        "null: the default connection.",
    )
    agents = AgentSlugsField(
        child=serializers.CharField(max_length=50),
        required=False,
        max_length=200,
        help_text="Slugs of the agents that search this knowledge base.",
    )
    document_count = serializers.SerializerMethodField()
    domains = serializers.ListField(
        child=serializers.ChoiceField(choices=Domain.choices),
        required=False,
        max_length=len(Domain.choices),
        help_text="The capability domains it covers (default: knowledge, documents).",
    )
    health = serializers.SerializerMethodField()

    class Meta:
        model = KnowledgeBase
        fields = [
            "id",
            "slug",
            "name",
            "description",
            "embedder",
            "provider_connection",
            "embedding_model",
            "dimensions",
            "chunk_size",
            "chunk_overlap",
            "agents",
            "document_count",
            "domains",
            "health",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]
        extra_kwargs = {"description": {"max_length": MAX_DESCRIPTION}}

    @extend_schema_field(ProviderHealthSerializer)
    def get_health(self, knowledge_base: KnowledgeBase) -> dict[str, Any]:
        """The last periodic health check of its embedder."""
        return ProviderHealthSerializer(knowledge_base.health.as_json()).data

    def get_document_count(self, knowledge_base: KnowledgeBase) -> int:
        return selectors.knowledge_base_document_count(knowledge_base)

    def validate_agents(self, slugs: list[str]) -> list[Agent]:
        wanted = set(slugs)
        found = agents_named(tenant=self.context["tenant"], slugs=sorted(wanted))
        missing = sorted(wanted - found.keys())
        if missing:
            raise serializers.ValidationError(f"No such agents here: {', '.join(missing)}.")
        return [found[slug] for slug in sorted(wanted)]

    def save_with_service(
        self, tenant: Tenant, knowledge_base: KnowledgeBase | None, changes: dict[str, Any]
    ) -> KnowledgeBase:
        return services.knowledge_base_save(
            tenant=tenant, knowledge_base=knowledge_base, changes=changes
        )


class DocumentSerializer(serializers.ModelSerializer):
    knowledge_base = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    size = serializers.SerializerMethodField(help_text="Bytes of the stored content.")

    class Meta:
        model = Document
        fields = [
            "id",
            "knowledge_base",
            "title",
            "source",
            "url",
            "filename",
            "content_type",
            "size",
            "checksum",
            "status",
            "progress",
            "error",
            "chunk_count",
            "token_count",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_size(self, document: Document) -> int:
        size = getattr(document, "content_size", None)
        return size if size is not None else len(document.content or b"")


class DocumentCreateSerializer(StrictSerializer):
    """A new document: an optional title and exactly one of file, text or url."""

    title = serializers.CharField(
        max_length=300, required=False, allow_blank=True, help_text="Default: from the source."
    )
    file = serializers.FileField(
        required=False,
        allow_empty_file=False,
        help_text="A file to upload (multipart/form-data): text, Markdown, HTML or PDF.",
    )
    text = serializers.CharField(
        required=False, trim_whitespace=False, help_text="Pasted text (or Markdown)."
    )
    url = serializers.URLField(
        required=False, max_length=2000, help_text="A public web page to fetch."
    )

    def validate_title(self, value: str) -> str:
        _refuse_nul(value)
        return value

    def validate_text(self, value: str) -> str:
        _refuse_nul(value)
        if not value.strip():
            raise serializers.ValidationError("The text is empty.")
        if len(value.encode("utf-8", "surrogatepass")) > max_document_bytes():
            raise TooLarge(_too_large_message())
        return value

    def validate_file(self, value: Any) -> Any:
        if value.size > max_document_bytes():
            raise TooLarge(_too_large_message())
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        given = [name for name in ("file", "text", "url") if attrs.get(name) not in (None, "")]
        if len(given) != 1:
            raise serializers.ValidationError(
                {"non_field_errors": ["Give exactly one of file, text or url."]}
            )
        return attrs


def _refuse_nul(value: str) -> None:
    if "\x00" in value:
        raise serializers.ValidationError("Text may not contain NUL characters.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise serializers.ValidationError("Text must be valid Unicode.") from None


def _too_large_message() -> str:
    return f"The document is larger than {max_document_bytes() // (1024 * 1024)} MB."


class SearchSerializer(StrictSerializer):
    """A search: the query, how many hits at most, and how to rank."""

    query = serializers.CharField(max_length=MAX_QUERY, help_text="What to look for.")
    top_k = serializers.IntegerField(
        min_value=1, max_value=MAX_TOP_K, default=5, help_text="How many hits at most."
    )
    mode = serializers.ChoiceField(
        choices=list(MODES),
        default="hybrid",
        help_text="hybrid (vectors and full text), vector or lexical (full text only).",
    )

    def validate_query(self, value: str) -> str:
        _refuse_nul(value)
        if not value.strip():
            raise serializers.ValidationError("Say what to look for.")
        return value


class SearchHitSerializer(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    document_id = serializers.IntegerField()
    document_title = serializers.CharField()
    knowledge_base_id = serializers.IntegerField()
    text = serializers.CharField()
    heading_path = serializers.CharField(allow_blank=True)
    page = serializers.IntegerField(allow_null=True)
    score = serializers.FloatField()


class SearchResultSerializer(serializers.Serializer):
    query = serializers.CharField()
    mode = serializers.CharField()
    hits = SearchHitSerializer(many=True)


# -- knowledge bases -----------------------------------------------------------------------
KB = OpenApiParameter(
    "slug",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The knowledge base's slug (or its numeric id).",
)
KB_PARENT = OpenApiParameter(
    "kb",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The knowledge base's slug (or its numeric id).",
)
DOCUMENT_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH)
TOO_LARGE = {413: error("The document is larger than the limit (`RAG_MAX_DOCUMENT_BYTES`).")}

KB_REQUEST = {
    "slug": "handbook",
    "name": "Employee handbook",
    "description": "Policies, benefits, how-tos.",
    "embedder": "lexical",
    "chunk_size": 800,
    "chunk_overlap": 100,
    "agents": ["support"],
    "domains": ["knowledge", "documents"],
}
KB_RESPONSE = {
    "id": 3,
    **KB_REQUEST,
    "provider_connection": None,
    "embedding_model": "",
    "dimensions": None,
    "document_count": 12,
    "health": {"status": "ok", "reason": "", "checked_at": "2025-01-01T12:05:00Z"},
    "created_at": "2025-01-01T12:00:00Z",
    "updated_at": "2025-01-01T12:00:00Z",
}
DOCUMENT_RESPONSE = {
    "id": 41,
    "knowledge_base": "handbook",
    "title": "Holidays",
    "source": "text",
    "url": "",
    "filename": "",
    "content_type": "text/plain",
    "size": 5120,
    "checksum": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "status": "processing",
    "progress": 40,
    "error": "",
    "chunk_count": 0,
    "token_count": 0,
    "created_at": "2025-01-01T12:00:00Z",
    "updated_at": "2025-01-01T12:00:02Z",
}
HIT_EXAMPLE = {
    "chunk_id": 907,
    "document_id": 41,
    "document_title": "Holidays",
    "knowledge_base_id": 3,
    "text": "Everyone gets 25 days of paid holiday a year, plus public holidays.",
    "heading_path": "Holidays > Paid leave",
    "page": None,
    "score": 0.83,
}


def knowledge_base_for(tenant: Tenant, value: str) -> KnowledgeBase:
    """The tenant's knowledge base by slug, else by numeric id; 404 otherwise."""
    value = path_text(value, "knowledge base")
    return selectors.knowledge_base_get(tenant=tenant, slug_or_id=value)


@extend_schema_view(
    **crud_schema(
        "knowledge base",
        "knowledge bases",
        KnowledgeBaseSerializer,
        lookup=KB,
        filters=[
            OpenApiParameter(
                "embedder",
                OpenApiTypes.STR,
                enum=["static", "local", "provider", "lexical"],
                description="Only knowledge bases with this embedder.",
            )
        ],
        request_example=KB_REQUEST,
        response_example=KB_RESPONSE,
    )
)
class KnowledgeBaseViewSet(TenantCrudViewSet):
    """The tenant's knowledge bases. `embedder` is `static` (the default: a static model
    built in, distilled from all-MiniLM-L6-v2), `local` (all-MiniLM-L6-v2 in the worker,
    where its optional install is), `provider` (a provider connection's embedding model)
    or `lexical` (no embeddings: full-text search only). Deleting one deletes its
    documents and chunks."""

    model = KnowledgeBase
    serializer_class = KnowledgeBaseSerializer
    lookup_field = "slug"

    def select(self, **filters: Any) -> models.QuerySet:
        return selectors.knowledge_bases_of(tenant=self.tenant, **filters)

    def list_filters(self) -> dict[str, Any]:
        return {"embedder": query_text(self.request, "embedder")}

    def get_object(self) -> KnowledgeBase:
        slug = path_text(self.kwargs["slug"], "knowledge base")
        return selectors.knowledge_base_shown(tenant=self.tenant, slug_or_id=slug)

    def delete_with_service(self, instance: KnowledgeBase) -> None:
        services.knowledge_base_delete(tenant=self.tenant, knowledge_base=instance)

    @extend_schema(
        summary="Search a knowledge base",
        description="The chunks that best match `query`, best first. `mode`: `hybrid` "
        "(vector and full-text ranks fused), `vector` or `lexical` (full text only; what a "
        "lexical knowledge base always does). Needs the `read` scope.",
        parameters=[KB],
        request=SearchSerializer,
        responses={
            200: SearchResultSerializer,
            **ERRORS,
            502: error(
                "The embedder (e.g. the provider connection) failed; a tenant admin "
                "must check the knowledge base's configuration."
            ),
        },
        examples=[
            OpenApiExample(
                "A question",
                {"query": "How many days of holiday?", "top_k": 5, "mode": "hybrid"},
                request_only=True,
            ),
            OpenApiExample(
                "Hits",
                {"query": "How many days of holiday?", "mode": "hybrid", "hits": [HIT_EXAMPLE]},
                response_only=True,
            ),
        ],
    )
    @action(detail=True, methods=["post"], url_path="search")
    def search(self, request: Request, slug: str) -> Response:
        knowledge_base = knowledge_base_for(self.tenant, slug)
        serializer = SearchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            hits = services.search(
                tenant=self.tenant,
                knowledge_base_ids=[knowledge_base.pk],
                query=data["query"],
                top_k=data["top_k"],
                mode=data["mode"],
                meter=quotas.Meter.for_initiator(self.tenant.pk, request_user_or_key(request)),
            )
        except EmbeddingError as exc:
            raise EmbedderFailed(str(exc)) from None
        body = {"query": data["query"], "mode": data["mode"], "hits": [_hit(h) for h in hits]}
        return Response(SearchResultSerializer(body).data)

    action_policy = {"search": Action.READ_DATA}  # a read, though it is a POST


def _hit(hit: Any) -> dict[str, Any]:
    return {
        "chunk_id": hit.chunk_id,
        "document_id": hit.document_id,
        "document_title": hit.document_title,
        "knowledge_base_id": hit.knowledge_base_id,
        "text": hit.text,
        "heading_path": hit.heading_path or "",
        "page": hit.page,
        "score": float(hit.score),
    }


# -- documents -----------------------------------------------------------------------------
@extend_schema_view(
    list=extend_schema(
        summary="List a knowledge base's documents",
        description="With each document's ingestion `status` (pending, processing, ready, "
        "failed), `progress` (0-100) and `error`. Poll it while documents are ingesting.",
        parameters=[
            KB_PARENT,
            OpenApiParameter(
                "status",
                OpenApiTypes.STR,
                enum=["pending", "processing", "ready", "failed"],
                description="Only documents with this status.",
            ),
        ],
        responses={200: DocumentSerializer(many=True), **ERRORS},
        examples=[OpenApiExample("A document", DOCUMENT_RESPONSE, response_only=True)],
    ),
    create=extend_schema(
        summary="Add a document",
        description="Exactly one source: `file` (multipart/form-data upload), `text` "
        "(pasted) or `url` (fetched by the worker through the guarded egress client). The "
        "document is queued for ingestion (status `pending`); follow its progress with "
        "GET. Over the size limit: 413.",
        parameters=[KB_PARENT],
        request={
            "application/json": DocumentCreateSerializer,
            "multipart/form-data": DocumentCreateSerializer,
        },
        responses={201: DocumentSerializer, **ERRORS, **TOO_LARGE},
        examples=[
            OpenApiExample(
                "Pasted text",
                {"title": "Holidays", "text": "# Holidays\n\nEveryone gets 25 days."},
                request_only=True,
            ),
            OpenApiExample(
                "A web page", {"url": "https://example.com/handbook"}, request_only=True
            ),
            OpenApiExample(
                "Queued",
                {**DOCUMENT_RESPONSE, "status": "pending", "progress": 0},
                response_only=True,
                status_codes=["201"],
            ),
        ],
    ),
    retrieve=extend_schema(
        summary="Get a document",
        parameters=[KB_PARENT, DOCUMENT_ID],
        responses={200: DocumentSerializer, **ERRORS},
        examples=[OpenApiExample("A document", DOCUMENT_RESPONSE, response_only=True)],
    ),
    destroy=extend_schema(
        summary="Delete a document and its chunks",
        parameters=[KB_PARENT, DOCUMENT_ID],
        responses={204: None, **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    ),
)
class DocumentViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantViewSet,
):
    """The documents of one knowledge base (`/knowledge-bases/{kb}/documents`)."""

    serializer_class = DocumentSerializer
    read_action = Action.READ_DATA
    write_action = Action.WRITE_DATA

    def knowledge_base(self) -> KnowledgeBase:
        cached = getattr(self, "_knowledge_base", None)
        if cached is None:
            cached = self._knowledge_base = knowledge_base_for(self.tenant, self.kwargs["kb"])
        return cached

    def get_queryset(self) -> models.QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return Document.objects.none()
        wanted = query_text(self.request, "status") if self.action == "list" else None
        return selectors.documents_of(
            tenant=self.tenant, knowledge_base=self.knowledge_base(), status=wanted
        )

    def get_object(self) -> Document:
        return self.document(path_id(self.kwargs["pk"], "document"))

    def document(self, document_id: int) -> Document:
        return selectors.document_get(
            tenant=self.tenant, knowledge_base=self.knowledge_base(), document_id=document_id
        )

    def create(self, request: Request, *args, **kwargs) -> Response:
        knowledge_base = self.knowledge_base()
        serializer = DocumentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        document = services.document_add(
            tenant=self.tenant,
            knowledge_base=knowledge_base,
            title=data.get("title", ""),
            text=data.get("text"),
            upload=data.get("file"),
            url=data.get("url"),
        )
        return Response(self._present(document), status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: Document) -> None:
        services.document_delete(tenant=self.tenant, document=instance)

    @extend_schema(
        summary="Ingest a document again",
        description="Drops its chunks and queues it again (status `pending`), e.g. after "
        "changing the knowledge base's chunking or embedder, or after a failure.",
        parameters=[KB_PARENT, DOCUMENT_ID],
        request=None,
        responses={202: DocumentSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Queued",
                {**DOCUMENT_RESPONSE, "status": "pending", "progress": 0},
                response_only=True,
                status_codes=["202"],
            )
        ],
    )
    @action(detail=True, methods=["post"])
    def reingest(self, request: Request, *args, **kwargs) -> Response:
        document = services.document_reingest(
            tenant=self.tenant, document=self.get_object(), force=True
        )
        return Response(self._present(document), status=status.HTTP_202_ACCEPTED)

    def _present(self, document: Document | None) -> dict[str, Any]:
        """A document as the API shows it, read afresh (the service may have queued it)."""
        pk = document.pk if isinstance(document, Document) else self.get_object().pk
        return DocumentSerializer(self.document(pk)).data
