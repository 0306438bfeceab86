"""`file_read`: an agent reads a whole document of its knowledge bases by id, page by page;
nothing else (another tenant's, an unlinked knowledge base's, a path) is ever read."""

from __future__ import annotations

import builtins
import io
import json
import os

import pytest
from asgiref.sync import async_to_sync

from agents.runs import run_inline
from agents.tool_sources import effective_tools
from rag.ingestion import ingest
from rag.models import Chunk, Document
from rag.runtime.extract import extract
from rag.services import document_add, knowledge_base_save
from tests.factories import make_agent
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall as Call

pytestmark = pytest.mark.django_db(transaction=True)

PARAGRAPH = (
    "Section {n} explains the travel policy in detail: economy class for flights under six "
    "hours, receipts for every expense above twenty euros, and approval before booking.\n\n"
)
MANUAL = "# Travel manual\n\n" + "".join(
    (f"## Part {n}\n\n" if n % 5 == 0 else "") + PARAGRAPH.format(n=n) for n in range(60)
)


def base_with(tenant, slug: str, title: str, text: str, **changes):
    base = knowledge_base_save(
        tenant=tenant,
        changes={
            "name": slug.title(),
            "slug": slug,
            "embedder": "lexical",
            "chunk_size": 60,
            "chunk_overlap": 15,
            **changes,
        },
    )
    document = document_add(tenant=tenant, knowledge_base=base, title=title, text=text)
    assert ingest(document.pk) == "ready"
    return base, Document.objects.get(pk=document.pk)


def read(agent, **arguments):
    """One `file_read` call as the agent's runs make it (the run's tenant in the context)."""
    tool = effective_tools(agent).registry.get("file_read")
    call = Call("f1", "file_read", arguments)
    return async_to_sync(ToolRegistry([tool]).execute)(call, RunContext(agent.tenant_id))


@pytest.fixture
def manual(trio, agent):
    base, document = base_with(trio.acme, "travel", "Travel manual", MANUAL)
    base.agents.add(agent)
    return document


def test_a_document_is_read_whole_in_pages(agent, manual):
    assert Chunk.objects.filter(document=manual).count() > 10  # overlapping chunks
    pages, offset = [], 0
    while offset is not None:
        result = read(agent, document_id=manual.pk, offset=offset, max_chars=1000)
        assert result.error is None, result.error
        pages.append(result.result)
        offset = result.result["next_offset"]
    extracted = extract(
        bytes(manual.content),
        filename=manual.filename,
        content_type=manual.content_type,
        max_bytes=len(manual.content),
    ).text
    assert "".join(page["text"] for page in pages) == extracted  # overlaps taken out
    assert extracted.startswith("# Travel manual") and "Section 59" in extracted
    first, last = pages[0], pages[-1]
    assert first["total_chars"] == len("".join(p["text"] for p in pages))
    assert first["note"].endswith(f"call file_read with document_id {manual.pk} and offset 1000")
    assert first["title"] == "Travel manual" and first["knowledge_base"] == "Travel"
    assert last["next_offset"] is None and "the end of the document" in last["note"]
    assert len(pages) == -(-first["total_chars"] // 1000)


def test_the_id_may_come_as_text_and_pages_are_bounded(agent, manual):
    result = read(agent, document_id=str(manual.pk))
    assert result.error is None and len(result.result["text"]) == result.result["total_chars"]
    too_much = read(agent, document_id=manual.pk, max_chars=10_000_000)
    assert too_much.error and "max_chars" in too_much.error
    past = read(agent, document_id=manual.pk, offset=10**7)
    assert past.result["text"] == "" and "past the end" in past.result["note"]


def test_other_tenants_unlinked_and_missing_documents_answer_alike(trio, agent, manual):
    _, theirs = base_with(trio.globex, "theirs", "Their manual", MANUAL)
    _, unlinked = base_with(trio.acme, "hr", "HR manual", MANUAL)  # acme's, not the agent's
    missing = Document.objects.order_by("-pk").first().pk + 1000

    def error(document_id: int) -> str:
        result = read(agent, document_id=document_id)
        return result.error.replace(str(document_id), "N")

    assert error(theirs.pk) == "no document N in the knowledge bases you can read"
    assert error(unlinked.pk) == error(theirs.pk) == error(missing)


@pytest.mark.parametrize(
    "document_id",
    ["../../etc/passwd", "/etc/passwd", "~/.ssh/id_rsa", "C:\\Windows\\win.ini", "..", ".env"],
)
def test_a_path_is_refused_with_a_clear_error(agent, manual, document_id):
    result = read(agent, document_id=document_id)
    assert result.error == (
        "document_id is a document's number (the document_id knowledge_search gives), "
        "not a path or file name: no file is opened by name"
    )


def test_a_name_that_is_no_number_is_refused(agent, manual):
    assert read(agent, document_id="manual").error == (
        "document_id must be a document's number, such as 42"
    )
    assert read(agent, document_id=-manual.pk).error.startswith("document_id must be")


def test_a_stored_name_that_escapes_opens_nothing_on_the_host(trio, agent, manual, monkeypatch):
    """Uploads live in the database (Document.content; no file storage): a document whose
    file name climbs out of any directory is read from its chunks, and no host path is
    opened while the tool runs."""
    Document.objects.filter(pk=manual.pk).update(filename="../../../../etc/passwd", title="")
    opened: list[str] = []
    with monkeypatch.context() as watch:  # (only these: the fixtures' patches stay)
        for module, name in ((builtins, "open"), (io, "open"), (os, "open")):
            real = getattr(module, name)

            def watching(file, *args, _real=real, **kwargs):
                opened.append(str(file))
                return _real(file, *args, **kwargs)

            watch.setattr(module, name, watching)
        result = read(agent, document_id=manual.pk)
    assert result.error is None, result.error
    assert result.result["title"] == "../../../../etc/passwd"  # only its name, as a title
    assert result.result["text"].startswith("# Travel manual")
    assert not [path for path in opened if "passwd" in path]


def test_a_run_reads_a_document_it_found(trio, agent, manual, provider_server):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("f1", "file_read", json.dumps({"document_id": manual.pk}))]),
        TextReply("Economy class."),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="What does the manual say?")
    assert run.status == "succeeded", run.error
    told = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert json.loads(told["content"])["text"].startswith("# Travel manual")


def test_an_agent_without_knowledge_bases_has_no_file_read(trio, manual):
    other = make_agent(trio.acme, "other")
    assert not effective_tools(other).registry.has("file_read")
