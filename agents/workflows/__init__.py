"""Workflows a tenant declares: a document of typed input, steps and typed output, compiled
to the runtime's steps (agents/runtime/workflow.py). Everything outside this package
imports from here, never from a module inside (an import-linter contract says so).
docs/workflows.md describes the document.

    document.py     the document's shapes (pydantic) and its published JSON Schema
    expressions.py  JMESPath expressions: parsed and evaluated within bounds
    inference.py    what an expression gives, as a JSON Schema, for the compiler's type checks
    compiler.py     compile_definition: the document checked (every problem at its path)
                    and compiled to a runtime Workflow
"""

from agents.workflows.compiler import (
    CompiledWorkflow,
    References,
    ToolSchemas,
    ToolSignature,
    WorkflowInvalid,
    WorkflowProblem,
    compile_definition,
    definition_references,
)
from agents.workflows.document import WorkflowDocument, workflow_json_schema
from agents.workflows.expressions import ExpressionFailed

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
    "workflow_json_schema",
]
