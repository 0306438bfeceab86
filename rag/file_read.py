"""The `file_read` built-in: read a stored document of the agent's knowledge bases, by id,
page by page.

What is read is the document's text as ingestion extracted it, put back together from its
chunks (rag/runtime/document_text.py); the platform keeps no uploaded file anywhere else
(a Document holds its original bytes in the database, and there is no file storage). So no
name, path or URL from the model is ever opened: the id is a number, looked up among the
documents of the knowledge bases linked to the agent, within the run's tenant (from the
RunContext). Another tenant's document, one of a knowledge base the agent is not linked to
and a missing id all answer the same "no document" text. A path-like id is refused
before anything is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async

from rag.models import Chunk, Document
from rag.runtime.document_text import StoredChunk, document_text
from rag.tools import linked_knowledge_bases
from tools.runtime.context import RunContext
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed

TOOL_NAME = "file_read"
DEFAULT_MAX_CHARS = 20_000
MAX_MAX_CHARS = 50_000
_DIGITS = re.compile(r"^\s*#?(\d{1,18})\s*$")
_PATH_LIKE = re.compile(r"[/\\~:]|\.\.|^\.")

DESCRIPTION = (
    "Read the full text of a document of the knowledge base{names}, by its id (the "
    "`document_id` knowledge_search gives with each passage), a page of characters at a "
    "time. Returns the text from `offset`, at most `max_chars` characters, and where to "
    "continue (`next_offset`) while there is more. Use it when passages are not enough: "
    "to read a section in full, or a whole short document."
)
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "document_id": {
            "type": ["integer", "string"],
            "description": "The document's id, a number such as 42 (from knowledge_search).",
        },
        "offset": {
            "type": "integer",
            "minimum": 0,
            "default": 0,
            "description": "The character to start at (0: the beginning).",
        },
        "max_chars": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_MAX_CHARS,
            "default": DEFAULT_MAX_CHARS,
            "description": "The most characters to return.",
        },
    },
    "required": ["document_id"],
    "additionalProperties": False,
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "document_id": {"type": "integer"},
        "title": {"type": "string"},
        "knowledge_base": {"type": "string"},
        "offset": {"type": "integer"},
        "total_chars": {"type": "integer"},
        "text": {"type": "string"},
        "next_offset": {"type": ["integer", "null"]},
        "note": {"type": "string"},
    },
    "required": ["document_id", "text", "total_chars", "next_offset"],
}


@dataclass(frozen=True)
class StoredDocument:
    pk: int
    title: str
    knowledge_base: str
    status: str
    text: str


def file_read_tool(knowledge_base_ids: Iterable[int], *, names: Iterable[str] = ()) -> Tool:
    """`file_read` over the documents of these knowledge bases (of the calling run's
    tenant). `names` only shape the description the model reads."""
    ids = tuple(sorted({int(i) for i in knowledge_base_ids}))
    shown = ", ".join(names)

    async def handler(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        document_id = document_number(arguments.get("document_id"))
        offset = max(0, int(arguments.get("offset") or 0))
        max_chars = max(1, min(int(arguments.get("max_chars") or DEFAULT_MAX_CHARS), MAX_MAX_CHARS))
        document = await sync_to_async(stored_document)(int(ctx.tenant_id), ids, document_id)
        if document is None:
            raise ToolFailed(f"no document {document_id} in the knowledge bases you can read")
        if not document.text and document.status != "ready":
            raise ToolFailed(
                f"document {document_id} has no text yet (its ingestion is {document.status}); "
                "try again later"
            )
        return page_of(document, offset, max_chars)

    return Tool(
        name=TOOL_NAME,
        description=DESCRIPTION.format(names=f"s ({shown})" if shown else "s"),
        input_schema=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        handler=handler,
        tags=frozenset({"builtin", "knowledge", "rag"}),
        examples=({"document_id": 42, "offset": 0, "max_chars": 20000},),
        capability=Capability(effect=Effect.READ, idempotent=True, timeout_s=30.0),
    )


def file_read_tool_for_agent(agent: Any) -> Tool | None:
    """The agent's `file_read` tool, or None when it has no knowledge bases (the links are
    read as for knowledge_search: once per configuration version)."""
    bases = linked_knowledge_bases(agent)
    if not bases:
        return None
    return file_read_tool([pk for pk, _ in bases], names=[name for _, name in bases])


def document_number(value: Any) -> int:
    """The document id the model gave, as a number; ToolFailed for anything else (a path
    or a file name in particular: nothing is looked up by name)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and (match := _DIGITS.match(value)) and int(match.group(1)) > 0:
        return int(match.group(1))
    if isinstance(value, str) and _PATH_LIKE.search(value):
        raise ToolFailed(
            "document_id is a document's number (the document_id knowledge_search gives), "
            "not a path or file name: no file is opened by name"
        )
    raise ToolFailed("document_id must be a document's number, such as 42")


def stored_document(
    tenant_id: int, knowledge_base_ids: Iterable[int], document_id: int
) -> StoredDocument | None:
    """The document with its whole text, if it is the tenant's and in one of these
    knowledge bases; else None. Two queries (the document; its chunks, in order)."""
    row = (
        Document.objects.filter(
            pk=document_id, tenant_id=tenant_id, knowledge_base_id__in=list(knowledge_base_ids)
        )
        .values(
            "pk",
            "title",
            "filename",
            "url",
            "status",
            "knowledge_base__name",
            "knowledge_base__chunk_overlap",
        )
        .first()
    )
    if row is None:
        return None
    chunks = Chunk.objects.filter(document_id=document_id, tenant_id=tenant_id).order_by("ordinal")
    text = document_text(
        [StoredChunk(*values) for values in chunks.values_list("text", "heading_path", "page")],
        overlap_tokens=row["knowledge_base__chunk_overlap"],
    )
    return StoredDocument(
        pk=row["pk"],
        title=row["title"] or row["filename"] or row["url"] or f"Document {row['pk']}",
        knowledge_base=row["knowledge_base__name"],
        status=row["status"],
        text=text,
    )


def page_of(document: StoredDocument, offset: int, max_chars: int) -> dict[str, Any]:
    total = len(document.text)
    text = document.text[offset : offset + max_chars]
    end = offset + len(text)
    next_offset = end if end < total else None
    if offset >= total:
        note = f"offset {offset} is past the end: the document has {total} characters"
    elif next_offset is None:
        note = f"characters {offset}-{end} of {total}: the end of the document"
    else:
        note = (
            f"characters {offset}-{end} of {total}; to read on, call file_read with "
            f"document_id {document.pk} and offset {next_offset}"
        )
    return {
        "document_id": document.pk,
        "title": document.title,
        "knowledge_base": document.knowledge_base,
        "offset": offset,
        "total_chars": total,
        "text": text,
        "next_offset": next_offset,
        "note": note,
    }


# Shown beside its tool, and the capability domains it covers (base/plugins.py).
file_read_tool_for_agent.label = "knowledge"  # type: ignore[attr-defined]
file_read_tool_for_agent.domains = ("knowledge", "documents")  # type: ignore[attr-defined]
file_read_tool_for_agent.tool_names = ("file_read",)  # type: ignore[attr-defined]
