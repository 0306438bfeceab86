"""Every tool call takes the one tool-call step (agents/runtime/tool_step.py, docs/agents.md):
outside the registry and the step, no module of the platform executes a registry's tools
itself. A new `registry.execute(...)` — or `execute_all`, or either handed on as a function,
e.g. to async_to_sync — fails here: call through the step instead (a run, a direct call:
`agents.runs.tool_run`, or ToolCallStep)."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

PACKAGES = ("agentplatform", "agents", "tools", "rag", "lifecycle", "providers", "tenancy", "base")
# The registry executes (its execute_all calls execute); the step calls the registry.
ALLOWED = {"tools/runtime/registry.py", "agents/runtime/tool_step.py"}
EXECUTES = {"execute", "execute_all"}


def registry_executions(source: str) -> list[str]:
    """Each `<registry>.execute` / `.execute_all` in `source`, called or not: the receiver
    names a registry (`registry`, `self.registry`, `ToolRegistry(...)`, `BUILTINS`, the
    built-ins' registry). A database cursor's or a Redis pipeline's `execute` is not one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in EXECUTES:
            receiver = ast.unparse(node.value)
            if "registry" in receiver.lower() or receiver == "BUILTINS":
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_tool_call_goes_around_the_step():
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name not in ALLOWED and (hits := registry_executions(path.read_text())):
                found[name] = hits
    assert found == {}, f"tool calls around the tool-call step: {found}"


def test_the_check_sees_each_form_and_the_steps_own_call():
    step = (ROOT / "agents/runtime/tool_step.py").read_text()
    assert [hit.split(": ")[1] for hit in registry_executions(step)] == ["self.registry.execute"]
    source = """
result = await wctx.registry.execute(call, ctx)
done = async_to_sync(toolbox.registry.execute)(call, ctx)
both = await ToolRegistry([one]).execute_all(calls, ctx)
builtin = await BUILTINS.execute(call, ctx)
rows = cursor.execute("SELECT 1")
counts = await pipe.execute()
"""
    assert len(registry_executions(source)) == 4
