"""The two test tiers, assigned at collection (tests/conftest.py calls `tier_of`).

`integration`: the test starts a process — a live server, a Celery worker, a browser, a
child Python. That is a test under tests/browser/, one marked `@pytest.mark.integration`
(itself, its class or its module's `pytestmark`), or one that gets, however indirectly, a
fixture of `PROCESS_FIXTURES`.

`fast`: every other test. tests/conftest.py fails a fast test that starts a process, naming
the mark it needs, so a test that starts one without saying so cannot hide in the fast tier.
"""

from __future__ import annotations

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
