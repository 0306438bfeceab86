"""Fixture bodies for the fakes, to be registered by a conftest (fixtures defined in a package's
own conftest are not seen by tests in other folders).

    # tests/conftest.py
    from tests.fakes.fixtures import provider_server_fixture

    provider_server = pytest.fixture(name="provider_server")(provider_server_fixture)
"""

from __future__ import annotations

from collections.abc import Iterator

from tests.fakes.booking_api import BookingApi
from tests.fakes.provider_server import ProviderServer


def provider_server_fixture() -> Iterator[ProviderServer]:
    """A fresh `ProviderServer` for one test (function scope), closed afterwards."""
    server = ProviderServer()
    try:
        yield server
    finally:
        server.close()


def booking_api_fixture() -> Iterator[BookingApi]:
    """A fresh fake booking API (tests/fakes/booking_api.py) for one test, closed afterwards."""
    api = BookingApi()
    try:
        yield api
    finally:
        api.close()
