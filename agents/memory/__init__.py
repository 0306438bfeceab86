"""Governed memory: what agents remember, whose it is, and what people do about it — one
facade (an import-linter contract: the rest of the project imports only this module).

- scopes.py      a run's reach: whose facts it reads and where it writes (person, agent,
                 tenant, an API key's), from the agent's settings and the run's context
- recall.py      hybrid recall (words and meaning) over a reach; the fact embedder
- store.py       the memory tools' store: remember, recall, forget, audited
- expiry.py      retention: a fact's expiry, the periodic purge in batches
- tool_source.py the memory tools as an `agentplatform.tool_sources` plug-in
- selectors.py   which facts a person or key sees (REST, the memory page)
- services.py    a person's edit and delete, audited
- audit.py       the audit entries (never a fact's text)

docs/memory.md describes it as people and admins see it.
"""

from agents.memory.expiry import PURGE_BATCH, expires_at, facts_expired_purge
from agents.memory.recall import fact_embedder, register_fact_embedder
from agents.memory.scopes import MemorySettings, Reach, reach_of
from agents.memory.selectors import fact_about, fact_visible, facts_about, facts_visible
from agents.memory.services import (
    fact_delete,
    fact_edit,
    fact_text_checked,
    facts_forget,
    member_facts_forget,
)
from agents.memory.store import DjangoFactStore
from agents.memory.tool_source import memory_tools_for_agent

__all__ = [
    "PURGE_BATCH",
    "DjangoFactStore",
    "MemorySettings",
    "Reach",
    "expires_at",
    "fact_about",
    "fact_delete",
    "fact_edit",
    "fact_embedder",
    "fact_text_checked",
    "fact_visible",
    "facts_about",
    "facts_expired_purge",
    "facts_forget",
    "facts_visible",
    "member_facts_forget",
    "memory_tools_for_agent",
    "reach_of",
    "register_fact_embedder",
]
