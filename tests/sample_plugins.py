"""The sample plug-ins of docs/examples/plugins, for the tests that ask for one: importable
(`sample_module`), or installed and loaded as at the platform's next start (`installed`):
the module on the path and a dist-info declaring its pyproject's entry points, as pip leaves
a package, in a directory of the test's own. The environment is never changed."""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from base.versions import config_bump
from tools import tool_sources
from tools.apps import load_builtin_tools
from tools.runtime.builtins import BUILTINS

SAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples" / "plugins"


def sample_module(name: str) -> ModuleType:
    """The sample's module, importable from here on (not installed: no tenant has it)."""
    where = str(SAMPLES / name)
    if where not in sys.path:
        sys.path.append(where)
    return importlib.import_module(name)


def install(name: str, into: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample as pip installs it, into `into`, on the path for the test's duration."""
    package = SAMPLES / name
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    info = into / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    groups = [
        "\n".join([f"[{group}]", *(f"{key} = {value}" for key, value in points.items())])
        for group, points in project.get("entry-points", {}).items()
    ]
    (info / "entry_points.txt").write_text("\n\n".join(groups) + "\n")
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.syspath_prepend(str(into))
    importlib.invalidate_caches()


def sample_workflows_fixture(trio, tmp_path, monkeypatch):
    """docs/examples/plugins/sample_workflows installed and its tools loaded (every
    tenant's `compound_interest`), for this test only (tests/conftest.py: `sample_workflows`)."""
    install("sample_workflows", tmp_path, monkeypatch)
    monkeypatch.setattr(BUILTINS, "_tools", dict(BUILTINS._tools))
    monkeypatch.setattr(tool_sources, "BUILTIN_ORIGINS", dict(tool_sources.BUILTIN_ORIGINS))
    load_builtin_tools()  # as at the next start
    for tenant in (trio.acme, trio.globex):
        config_bump(tenant.pk)  # registries built before hold the built-ins of then
    yield sample_module("sample_workflows")
    for tenant in (trio.acme, trio.globex):
        config_bump(tenant.pk)
