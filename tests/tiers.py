"""The two test tiers, assigned at collection (tests/conftest.py calls `tier_of`).

`integration`: the test starts a process — a live server, a Celery worker, a browser, a
child Python. That is a test under tests/browser/, one marked `@pytest.mark.integration`,
or one whose code names a process starter (`PROCESS_STARTERS`, `STARTER_CALLS`): in the
test function, in any fixture it gets (however indirectly), or in a function or class of
the test suite that any of those names (its helpers, theirs, and so on).

`fast`: every other test. The scan reads code, not what runs; tests/conftest.py fails a
fast test that starts a process all the same, so a starter the scan cannot see (reached
through an attribute of an object, say) gets a clear error and a mark, not a slow fast tier.

Each test module is parsed once (`ast`): about half a second for the whole suite.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from pathlib import Path

import pytest

BROWSER_TESTS = Path(__file__).resolve().parent / "browser"
# Named anywhere (called, or handed to a thread pool): `subprocess.<one of these>`, and
# these names (bare or as `module.<name>`). The in-process fakes (provider, MCP and HTTP
# servers on threads) are none of them.
SUBPROCESS_FUNCTIONS = frozenset({"run", "Popen", "call", "check_call", "check_output"})
PROCESS_STARTERS = frozenset(
    {
        "Popen",
        "start_asgi_server",  # tests/live_server.py: uvicorn on the test database
        "WorkerFleet",  # tests/agents/workers.py: prefork Celery workers
        "sync_playwright",  # Chromium
    }
)
# Starters only when called: `asgi_server` is also the name of a fixture (an argument).
STARTER_CALLS = frozenset({"asgi_server"})
# Names Popen to patch it in every test: not a starter.
NOT_SCANNED = frozenset({("tests.conftest", "_fast_tests_start_no_process")})


def tier_of(item: pytest.Item) -> pytest.MarkDecorator:
    if item.get_closest_marker("integration") is not None:
        return pytest.mark.integration
    if BROWSER_TESTS in item.path.parents:
        return pytest.mark.integration
    functions = [getattr(item, "function", None)]
    fixtures = getattr(item, "_fixtureinfo", None)  # every fixture the test gets, transitively
    if fixtures is not None:
        functions += [defs[-1].func for defs in fixtures.name2fixturedefs.values() if defs]
    keys = {key for function in functions if (key := _key(function)) is not None}
    if any(_reaches_a_starter(key) for key in keys):
        return pytest.mark.integration
    return pytest.mark.fast


def _key(code: object) -> tuple[str, str] | None:
    """(module, top-level name) of a function or class of the test suite, else None."""
    if not (inspect.isfunction(code) or inspect.isclass(code)):
        return None
    module = getattr(code, "__module__", "") or ""
    if not module.startswith("tests.") or module not in sys.modules:
        return None
    return module, code.__qualname__.split(".", 1)[0]  # a method or local: its top level


@functools.cache
def _reaches_a_starter(key: tuple[str, str]) -> bool:
    pending, seen = [key], set()
    while pending:
        key = pending.pop()
        if key in seen or key in NOT_SCANNED:
            continue
        seen.add(key)
        starts, uses = _scanned(key)
        if starts:
            return True
        pending += uses
    return False


@functools.cache
def _scanned(key: tuple[str, str]) -> tuple[bool, tuple[tuple[str, str], ...]]:
    """Whether the function or class `key` names a starter, and the functions and classes
    of the test suite it uses."""
    module, name = key
    starts, names = _module_index(module).get(name, (False, frozenset()))
    namespace = vars(sys.modules[module])
    uses = {k for n in names if n in namespace and (k := _key(namespace[n])) is not None}
    return starts, tuple(uses)


@functools.cache
def _module_index(module: str) -> dict[str, tuple[bool, frozenset[str]]]:
    """For each top-level function and class of `module`: whether it names a process
    starter, and the names it uses (to follow into helpers)."""
    try:
        tree = ast.parse(Path(sys.modules[module].__file__).read_text())
    except (OSError, TypeError, SyntaxError):
        return {}
    return {
        node.name: _read(node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def _read(node: ast.AST) -> tuple[bool, frozenset[str]]:
    """Whether `node` names a process starter, and the names it loads (one walk)."""
    starts, names = False, set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
            names.add(child.id)
        starts = starts or _is_a_starter(child)
    return starts, frozenset(names)


def _is_a_starter(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id in PROCESS_STARTERS
    if isinstance(node, ast.Attribute):
        in_subprocess = isinstance(node.value, ast.Name) and node.value.id == "subprocess"
        subprocess_call = in_subprocess and node.attr in SUBPROCESS_FUNCTIONS
        return node.attr in PROCESS_STARTERS or subprocess_call
    if isinstance(node, ast.Call):
        return (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in STARTER_CALLS
    return False
