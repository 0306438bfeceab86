"""Workflows a tenant declares: a document of typed input, steps and typed output
(agents/runtime/declared_workflows: its shapes, expressions and compiler, no Django),
compiled to the runtime's steps (agents/runtime/workflow.py), saved and read here.
Everything outside this package imports from here, never from a module inside (an
import-linter contract says so). docs/workflows.md describes the document.

    compiling.py   workflow_compile: a document with the tenant's tools and agents
    services.py    workflow_save (compiled first; audited, versioned), workflow_delete
    selectors.py   workflows_of, workflow_get (another tenant's: 404)
    in_use.py      what a saved workflow names is not deleted (a delete check)
"""

from agents.runtime.declared_workflows.compiler import (
    CompiledWorkflow,
    References,
    ToolSchemas,
    ToolSignature,
    WorkflowInvalid,
    WorkflowProblem,
    compile_definition,
    definition_references,
)
from agents.runtime.declared_workflows.document import WorkflowDocument, workflow_json_schema
from agents.runtime.declared_workflows.expressions import ExpressionFailed
from agents.workflows.compiling import workflow_compile
from agents.workflows.in_use import refusals_to_delete, workflows_naming
from agents.workflows.selectors import workflow_get, workflows_of
from agents.workflows.services import workflow_delete, workflow_save

__all__ = [
    "CompiledWorkflow",
    "ExpressionFailed",
    "References",
    "ToolSchemas",
    "ToolSignature",
    "WorkflowDocument",
    "WorkflowInvalid",
    "WorkflowProblem",
    "compile_definition",
    "definition_references",
    "refusals_to_delete",
    "workflow_compile",
    "workflow_delete",
    "workflow_get",
    "workflow_json_schema",
    "workflow_save",
    "workflows_naming",
    "workflows_of",
]
