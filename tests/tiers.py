"""The two test tiers, assigned at collection (tests/conftest.py calls `tier_of`).

`integration`: the test starts a process — a live server, a Celery worker, a browser, a
child Python. That is a test under tests/browser/, one marked `@pytest.mark.integration`
(itself, its class or its module's `pytestmark`), or one that gets, however indirectly, a
fixture of `PROCESS_FIXTURES`.

`fast`: every other test. tests/conftest.py fails a fast test that starts a process, naming
the mark it needs, so a test that starts one without saying so cannot hide in the fast tier.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

BROWSER_TESTS = Path(__file__).resolve().parent / "browser"
# The suite's fixtures that start processes.
PROCESS_FIXTURES = frozenset(
    {
        "live_server_base",  # tests/conftest.py: the session's uvicorn on the test database
        "asgi_server",  # tests/api/conftest.py: that server
        "traced_server",  # tests/api/conftest.py: uvicorn exporting its spans
        "mcp_server",  # tests/mcp/conftest.py: uvicorn serving /mcp
        "web_server",  # tests/browser/conftest.py
        "celery_worker_process",  # tests/conftest.py: a Celery worker
    }
)


def tier_of(item: pytest.Item) -> pytest.MarkDecorator:
    if item.get_closest_marker("integration") is not None:
        return pytest.mark.integration
    if BROWSER_TESTS in item.path.parents:
        return pytest.mark.integration
    if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
        return pytest.mark.integration
    return pytest.mark.fast


def write_integration_modules(items: list[pytest.Item], target: Path) -> None:
    """The files holding integration tests (marked by then), relative to the project:
    `make test` passes them to its integration run, which then imports those alone
    (collecting every module costs a pytest worker about 8 s of CPU, schemathesis's schema
    built at collection included). Every xdist worker collects the same items: each writes
    the same list, atomically."""
    root = BROWSER_TESTS.parent.parent
    files = sorted(
        {
            str(item.path.relative_to(root))
            for item in items
            if item.get_closest_marker("integration")
        }
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}")
    partial.write_text("".join(f"{name}\n" for name in files))
    os.replace(partial, target)
