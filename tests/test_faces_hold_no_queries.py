"""The faces (REST and /v1, MCP, web) read through selectors: no module of theirs holds an
ORM query of its own (docs/design.md, Layout; HackSoft's styleguide, "selectors").

Each module is parsed, not grepped: a query is a manager (`Model.objects`), the generic
tenancy lookups (`get_for_tenant`, `get_for_write`) or Django's shortcuts
(`get_object_or_404`), or a call of a method only a queryset has (`.filter(...)`,
`.select_related(...)`, an argument-less `.count()`, a keyword-only `.get(...)`, ...). A
decorator such as a template library's `register.filter(...)` is not a call of a queryset.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FACES = ("agentplatform/api", "agentplatform/v1", "agentplatform/mcp", "agentplatform/web")

MANAGERS = {"objects", "_default_manager", "_base_manager"}
LOOKUPS = {"get_object_or_404", "get_list_or_404", "get_for_tenant", "get_for_write"}
QUERYSET_METHODS = {
    "filter", "exclude", "select_related", "prefetch_related", "annotate", "aggregate",
    "alias", "values_list", "order_by", "only", "defer", "distinct", "in_bulk",
    "select_for_update", "latest", "earliest", "get_or_create", "update_or_create",
    "bulk_create", "bulk_update",
}  # fmt: skip
# Names other objects share too: a queryset's only when called without arguments.
ARGUMENTLESS = {"all", "count", "exists", "first", "last", "iterator"}

# (module, the widest expression of its line) that a framework needs, or that only looks
# like a query; each with why.
RELATED_FIELD = (
    "DRF's related field takes its queryset where it is declared; TenantPrimaryKeyField and "
    "TenantSlugField narrow it to the request's tenant through tenancy's tenant_rows"
)
ALLOWED: dict[tuple[str, str], str] = {
    ("agentplatform/api/serializers.py", "ProviderConnection.objects.all()"): RELATED_FIELD,
    ("agentplatform/api/serializers.py", "TenantGroup.objects.all()"): RELATED_FIELD,
    ("agentplatform/api/serializers.py", "Agent.objects.all()"): RELATED_FIELD,
    ("agentplatform/api/serializers.py", "Crew.objects.all()"): RELATED_FIELD,
    ("agentplatform/api/serializers.py", "Dataset.objects.all()"): RELATED_FIELD,
    ("agentplatform/api/knowledge_api.py", "ProviderConnection.objects.all()"): RELATED_FIELD,
    ("agentplatform/web/health.py", "result.get(timeout=WORKER_TIMEOUT_S)"): (
        "Celery's AsyncResult.get: the worker's reply, not a query"
    ),
}


def queries(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, expression) of each ORM query in a module's tree."""
    decorators = {
        id(decorator)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for decorator in node.decorator_list
    }
    empty = {  # `Model.objects.none()` runs no query (DRF's schema generation asks one)
        id(node.func.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "none"
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in MANAGERS and id(node) not in empty:
            yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Call) and id(node) not in decorators:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if isinstance(func, ast.Name) and name not in LOOKUPS:
                continue
            bare = not node.args and not node.keywords
            if (
                name in LOOKUPS
                or name in QUERYSET_METHODS
                or (name in ARGUMENTLESS and bare)
                or (name == "get" and node.keywords and not node.args)
                or (name == "values" and not bare)
            ):
                yield node.lineno, ast.unparse(node)


def face_queries() -> dict[str, list[tuple[int, str]]]:
    found: dict[str, list[tuple[int, str]]] = {}
    for face in FACES:
        for path in sorted((ROOT / face).rglob("*.py")):
            module = str(path.relative_to(ROOT))
            widest: dict[int, str] = {}  # per line, the outermost expression
            for line, expression in queries(ast.parse(path.read_text(), str(path))):
                widest[line] = max(widest.get(line, ""), expression, key=len)
            hits = [(line, e) for line, e in widest.items() if (module, e) not in ALLOWED]
            if hits:
                found[module] = sorted(hits)
    return found


def test_the_faces_hold_no_orm_queries_of_their_own():
    found = [
        f"{module}:{line}: {expression}"
        for module, hits in face_queries().items()
        for line, expression in hits
    ]
    assert not found, "Read through a selector beside the app's services:\n" + "\n".join(found)


def test_the_allowed_entries_still_exist():
    """An allowance for a line that no longer exists is dead weight: drop it."""
    present = {
        (str(path.relative_to(ROOT)), expression)
        for face in FACES
        for path in (ROOT / face).rglob("*.py")
        for _, expression in queries(ast.parse(path.read_text()))
    }  # (every expression: an allowed one is the widest of its line)
    assert not set(ALLOWED) - present


def test_the_check_finds_each_kind_of_query():
    source = """
from django.template import Library
register = Library()

@register.filter(name="usd")
def usd(value): return value

def view(request, pk, words):
    Agent.objects.all()
    get_for_tenant(Agent, request.tenant, pk=pk)
    request.tenant.agents.filter(active=True)
    run.events.count()
    Run.objects
    Run.objects.none()
    words.count("a"); words.get("a"); {}.values(); sorted(words)
"""
    assert sorted(line for line, _ in queries(ast.parse(source))) == [9, 9, 10, 11, 12, 13]
