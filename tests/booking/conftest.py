"""The booking example's fixtures: the fake booking API, and the example installed in acme."""

from __future__ import annotations

import pytest

from agents.models import Agent
from tests.booking.example import install_example
from tests.fakes.fixtures import booking_api_fixture

booking_api = pytest.fixture(name="booking_api")(booking_api_fixture)


@pytest.fixture
def booking_agent(trio, booking_api, settings, tmp_path) -> Agent:
    """acme's `booking` agent and its three tools, from docs/examples/booking.yaml pointed at
    the fake API (on loopback, which the egress guard lets through here)."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    install_example(trio.acme, booking_api, tmp_path)
    return Agent.objects.get(tenant=trio.acme, slug="booking")
