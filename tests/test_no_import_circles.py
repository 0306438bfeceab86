"""No import circle among the project's modules (docs/design.md, rules of the layout): from
any module, following its imports never leads back to it, so each can be read, and loaded,
knowing only the modules below it.

The graph is grimp's (import-linter's own): every import counts, at module level, inside a
function, or under `if TYPE_CHECKING:`, since a reader follows them all. A circle is a
strongly connected component of more than one module.
"""

from __future__ import annotations

from collections.abc import Iterator

import grimp

PACKAGES = ("agentplatform", "agents", "tools", "providers", "rag", "lifecycle", "tenancy", "base")


def project_graph() -> grimp.ImportGraph:
    """The imports among the project's modules. About 0.1 s; nothing is cached on disk."""
    return grimp.build_graph(
        *PACKAGES,
        include_external_packages=False,
        exclude_type_checking_imports=False,
        cache_dir=None,
    )


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan's
    algorithm, iterative: no recursion limit however long a chain of imports is)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    work: list[tuple[str, Iterator[str]]] = []  # the depth-first path: each module's imports

    def enter(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        work.append((module, iter(sorted(graph.find_modules_directly_imported_by(module)))))

    for root in sorted(graph.modules):
        if root in index:
            continue
        enter(root)
        while work:
            module, imported = work[-1]
            following = next((m for m in imported if m not in index or m in on_stack), None)
            if following is not None:
                if following in index:  # on the stack: a way back up
                    low[module] = min(low[module], index[following])
                else:
                    enter(following)
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(graph: grimp.ImportGraph, circle: list[str]) -> str:
    """A circle's modules and each import line that ties two of them."""
    lines = [" <-> ".join(circle)]
    for importer in circle:
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported in circle:
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    where = f"{importer}:{detail['line_number']}"
                    lines.append(f"    {where} -> {imported}: {detail['line_contents']}")
    return "\n".join(lines)


def test_no_module_of_the_project_is_in_an_import_circle():
    graph = project_graph()
    found = circles(graph)
    assert not found, "Import circles (move code to where it belongs, one way):\n" + "\n".join(
        describe(graph, circle) for circle in found
    )


def test_the_graph_holds_every_package_and_every_kind_of_import():
    """Else the test above could pass by not seeing: a package, a function's own import
    (the tenancy app's ready() connecting receivers) or one under TYPE_CHECKING (tools'
    definitions naming their model). If an example import goes away, name another."""
    graph = project_graph()
    assert {module.split(".")[0] for module in graph.modules} == set(PACKAGES)
    assert graph.direct_import_exists(importer="tenancy.apps", imported="tenancy.api_keys")
    assert graph.direct_import_exists(importer="tools.definitions", imported="tools.models")


def test_circles_finds_each_circle_once_and_nothing_else():
    graph = grimp.ImportGraph()
    for importer, imported in [
        ("a", "b"), ("b", "c"), ("c", "a"),  # a circle of three
        ("c", "d"), ("d", "e"),  # leaving it, one way
        ("e", "f"), ("f", "e"),  # a circle of two below it
        ("g", "g"),  # a module importing itself is no circle of modules
        ("h", "a"),  # entering the first circle, one way
    ]:  # fmt: skip
        graph.add_import(importer=importer, imported=imported)

    assert sorted(circles(graph)) == [["a", "b", "c"], ["e", "f"]]
