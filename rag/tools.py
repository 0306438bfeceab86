"""Knowledge bases as a tool: `knowledge_search(query, top_k)` with numbered citations.

The tenant comes from the RunContext (server-side), never from the model's arguments;
the knowledge-base ids are fixed when the tool is made (an agent's own knowledge bases),
and ids of another tenant simply find nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents import quotas
from base.versions import per_config_version
from providers.runtime.errors import QuotaRefused
from rag.search import MAX_TOP_K, asearch
from tools.runtime.context import RunContext
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed

TOOL_NAME = "knowledge_search"
DESCRIPTION = (
    "Search the knowledge base{names} for passages relevant to a question. Returns the best "
    "passages with their document title, section and page, each with a citation mark like "
    "[1]: quote the marks of the passages you use in your answer. Ask short, specific "
    "queries; search again with other words if the results do not answer the question."
)
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 1000,
            "description": "What to look for.",
        },
        "top_k": {
            "type": "integer",
            "minimum": 1,
            "maximum": 20,
            "default": 5,
            "description": "How many passages to return.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "citation": {"type": "string"},
                    "text": {"type": "string"},
                    "document_title": {"type": "string"},
                    "document_id": {"type": "integer"},
                    "heading_path": {"type": "string"},
                    "page": {"type": ["integer", "null"]},
                    "score": {"type": "number"},
                },
            },
        }
    },
    "required": ["results"],
}


def knowledge_tool(knowledge_base_ids: Iterable[int], *, names: Iterable[str] = ()) -> Tool:
    """The `knowledge_search` tool over these knowledge bases (searched within the calling
    run's tenant). `names` only shape the description the model reads."""
    ids = tuple(sorted({int(i) for i in knowledge_base_ids}))
    shown = ", ".join(names)

    async def handler(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        query = str(arguments.get("query", "")).strip()
        if not query:
            raise ToolFailed("query must not be empty")
        top_k = min(int(arguments.get("top_k", 5)), MAX_TOP_K)
        # A provider's embedding of the query is held against the run's quotas (a refusal:
        # an error result and `tool.quota_exceeded`, as the `llm` built-in's).
        calls = ctx.model_calls
        meter = calls.meter if isinstance(calls, quotas.ToolModelCalls) else None
        try:
            hits = await asearch(
                tenant=int(ctx.tenant_id), knowledge_base_ids=ids, query=query, top_k=top_k,
                meter=meter,
            )  # fmt: skip
        except QuotaRefused as exc:
            ctx.usage.refuse(ctx.call_id, {"message": str(exc), **exc.details()})
            raise ToolFailed(str(exc)) from None
        return {
            "results": [
                {
                    "citation": f"[{number}]",
                    "text": hit.text,
                    "document_title": hit.document_title,
                    "document_id": hit.document_id,
                    "heading_path": hit.heading_path,
                    "page": hit.page,
                    "score": hit.score,
                }
                for number, hit in enumerate(hits, start=1)
            ]
        }

    return Tool(
        name=TOOL_NAME,
        description=DESCRIPTION.format(names=f"s ({shown})" if shown else "s"),
        input_schema=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        handler=handler,
        tags=frozenset({"knowledge", "rag"}),
        examples=({"query": "refund policy for annual plans", "top_k": 5},),
        capability=Capability(effect=Effect.READ, idempotent=True, timeout_s=60.0),
    )


def knowledge_tool_for_agent(agent: Any) -> Tool | None:
    """The agent's `knowledge_search` tool, or None when it has no knowledge bases. The
    tenant's agent-to-knowledge-base links are read once per configuration version
    (tools.loader: bumped by any knowledge base or link change), not once per run."""
    bases = linked_knowledge_bases(agent)
    if not bases:
        return None
    return knowledge_tool([pk for pk, _ in bases], names=[name for _, name in bases])


def linked_knowledge_bases(agent: Any) -> list[tuple[int, str]]:
    """(id, name) of the knowledge bases linked to the agent, by name; read once per
    configuration version for the whole tenant."""
    return _links(agent.tenant_id).get(agent.pk, [])


_remembered: dict[int, tuple[str, dict[int, list[tuple[int, str]]]]] = {}


def _links(tenant_id: int) -> dict[int, list[tuple[int, str]]]:
    from rag.models import KnowledgeBase

    def read() -> dict[int, list[tuple[int, str]]]:
        links: dict[int, list[tuple[int, str]]] = {}
        rows = (
            KnowledgeBase.agents.through.objects.filter(knowledgebase__tenant_id=tenant_id)
            .order_by("knowledgebase__name")
            .values_list("agent_id", "knowledgebase_id", "knowledgebase__name")
        )
        for agent_id, base_id, name in rows:
            links.setdefault(agent_id, []).append((base_id, name))
        return links

    return per_config_version(_remembered, tenant_id, read)


# Shown beside its tool, and the capability domains it covers (base/plugins.py).
knowledge_tool_for_agent.label = "knowledge"  # type: ignore[attr-defined]
knowledge_tool_for_agent.domains = ("knowledge", "documents")  # type: ignore[attr-defined]
knowledge_tool_for_agent.tool_names = (TOOL_NAME,)  # type: ignore[attr-defined]
