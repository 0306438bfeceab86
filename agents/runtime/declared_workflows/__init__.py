"""Workflows a tenant declares as a document, compiled to the runtime's steps
(agents/runtime/workflow.py). No Django: the configuration document's compiler checks the
workflows it holds with it, and `agents.workflows` (the app's facade) saves and runs them.

    document.py     the document's shapes (pydantic) and its published JSON Schema
    expressions.py  JMESPath expressions: parsed and evaluated within bounds
    inference.py    what an expression gives, as a JSON Schema, for the type checks
    compiler.py     compile_definition: every problem at its path, or the runtime Workflow
    step_calls.py   what the compiled steps call: the scope read and written
"""
