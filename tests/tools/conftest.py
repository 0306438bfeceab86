from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.tools.local_server import LocalServer


@pytest.fixture
def local_server() -> Iterator[LocalServer]:
    server = LocalServer()
    try:
        yield server
    finally:
        server.close()
