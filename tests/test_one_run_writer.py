"""A run's record (its Run row and its RunEvent rows) is written by the Run package alone
(agents/runs/: run_start's insert, the leased writer, the unleased one; docs/design.md):
outside it, no module of the platform creates, updates or saves one, in the ORM or in SQL.
A new `Run.objects.filter(...).update(...)`, `RunEvent.objects.create(...)`, `run.save()`
or `UPDATE agents_run` elsewhere fails here: ask the package (agents.runs) instead.

lifecycle/ is the one exception: erasing a person's content and applying retention clear
fields of records that exist (they never record what a run did)."""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT

PACKAGES = ("agentplatform", "agents", "tools", "rag", "lifecycle", "providers", "tenancy", "base")
OWNERS = ("agents/runs/", "lifecycle/")
MODELS = {"Run", "RunEvent"}
WRITES = {"create", "bulk_create", "update", "bulk_update", "get_or_create", "update_or_create"}
SQL_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE)\s+\"?agents_run(event)?\"?(\s|$)", re.IGNORECASE)
RUN_NAMES = re.compile(r"(^|\.)(run|child|parent)$")  # how a Run is named where it is saved


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def run_record_writes(source: str) -> list[str]:
    """Each write of a Run or RunEvent row in `source`: a manager's or queryset's write
    (`Run.objects....update(...)`), a new instance (`RunEvent(...)`), a `.save()` of what is
    named a run, and SQL that inserts into or updates their tables."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _writes(node.func):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
        elif isinstance(node, ast.Constant) and SQL_WRITE.search(str(node.value)):
            found.append(f"{node.lineno}: SQL {node.value[:60]!r}")
    return found


def _writes(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in MODELS  # a new row
    if not isinstance(func, ast.Attribute):
        return False
    receiver = ast.unparse(func.value)
    if func.attr == "save":
        return bool(RUN_NAMES.search(receiver))
    root = _root(func.value)
    on_model = isinstance(root, ast.Name) and root.id in MODELS and ".objects" in receiver
    return func.attr in WRITES and on_model


def test_no_run_record_is_written_outside_the_run_package():
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith(OWNERS) or "/migrations/" in name:
                continue
            if hits := run_record_writes(path.read_text()):
                found[name] = hits
    assert found == {}, f"run records written outside agents/runs/: {found}"


def test_the_check_sees_each_form_of_a_write():
    source = """
Run.objects.filter(pk=1).update(agent_draft_id=2)
RunEvent.objects.create(run=run, seq=1)
Run.objects.bulk_create(runs)
event = RunEvent(run=run, seq=2)
run.save(update_fields=["status"])
self.run.save()
cursor.execute('UPDATE agents_run SET status = %s')
cursor.execute("INSERT INTO agents_runevent (seq) VALUES (1)")
Run.objects.filter(pk=1).first()
Run.objects.filter(pk=1).delete()
conversation.save()
cursor.execute("SELECT * FROM agents_run")
"""
    assert [hit.split(":")[0] for hit in run_record_writes(source)] == [
        str(line) for line in range(2, 10)
    ]
