"""Fixtures of the knowledge-base tests: knowledge bases of acme and globex, a slow
embeddings server (to watch ingestion progress), and waiting for documents."""

from __future__ import annotations

import hashlib
import json
import math
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rag import services
from rag.models import Document, DocumentStatus, KnowledgeBase
from tests.factories import make_connection

TERMINAL = (DocumentStatus.READY, DocumentStatus.FAILED)


def vector_for(text: str, dimensions: int) -> list[float]:
    raw = b"".join(
        hashlib.sha256(b"%d:%s" % (i, text.encode())).digest() for i in range(dimensions)
    )
    values = [x / 2**31 - 1.0 for x in struct.unpack(f"<{dimensions}I", raw[: 4 * dimensions])]
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


class SlowEmbeddings:
    """An OpenAI-style /v1/embeddings endpoint that waits `delay_s` before each answer."""

    def __init__(self, delay_s: float = 0.3, dimensions: int = 8) -> None:
        self.delay_s = delay_s
        self.dimensions = dimensions
        self.requests: list[int] = []  # batch sizes received
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                owner.requests.append(len(texts))
                time.sleep(owner.delay_s)
                data = json.dumps(
                    {
                        "object": "list",
                        "model": body["model"],
                        "data": [
                            {
                                "object": "embedding",
                                "index": i,
                                "embedding": vector_for(t, owner.dimensions),
                            }
                            for i, t in enumerate(texts)
                        ],
                        "usage": {"prompt_tokens": 1, "total_tokens": 1},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slow_embeddings():
    server = SlowEmbeddings()
    yield server
    server.close()


@pytest.fixture
def lexical_kb(trio) -> KnowledgeBase:
    return services.knowledge_base_save(
        tenant=trio.acme,
        changes={
            "name": "Handbook",
            "slug": "handbook",
            "embedder": "lexical",
            "chunk_size": 60,
            "chunk_overlap": 10,
        },
    )


def provider_kb(
    tenant, base_url: str, *, slug: str = "docs", chunk_size: int = 60
) -> KnowledgeBase:
    connection = make_connection(
        tenant,
        f"Embeddings {slug}",
        "openai",
        api_key="sk-test-key",
        base_url=base_url,
        max_retries=0,
    )
    return services.knowledge_base_save(
        tenant=tenant,
        changes={
            "name": slug.title(),
            "slug": slug,
            "embedder": "provider",
            "provider_connection": connection,
            "embedding_model": "text-embedding-3-small",
            "chunk_size": chunk_size,
            "chunk_overlap": 10,
        },
    )


def wait_for(document: Document, timeout_s: float = 60.0) -> Document:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        document.refresh_from_db()
        if document.status in TERMINAL:
            return document
        time.sleep(0.02)
    raise AssertionError(f"document {document.pk} still {document.status} after {timeout_s} s")


@pytest.fixture(autouse=True)
def _local_egress(settings):
    """The local fake servers are on 127.0.0.1, as the worker's environment allows too."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
