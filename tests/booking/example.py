"""The booking example (docs/examples/booking.yaml) pointed at a fake booking API and
installed in a tenant the way an admin would: the API key stored on each tool, then the
document imported with `manage.py config import`."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import yaml
from django.core.management import call_command

from tenancy.models import Tenant
from tests.fakes.booking_api import API_KEY_HEADER, BookingApi
from tools.models import ToolDefinition
from tools.services import tool_definition_save

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "booking.yaml"
PLACEHOLDER = "https://booking.example.com"  # the document's API; tests put the fake's URL
TOOLS = ("search_slots", "hold_slot", "confirm_booking")
DATE = "2026-12-03"


def example_text(api_url: str = PLACEHOLDER) -> str:
    """The example document, its API at `api_url`."""
    return EXAMPLE.read_text(encoding="utf-8").replace(PLACEHOLDER, api_url)


def example_data(api_url: str = PLACEHOLDER) -> dict[str, Any]:
    return yaml.safe_load(example_text(api_url))


def install_example(tenant: Tenant, api: BookingApi, tmp_path: Path) -> str:
    """Store the API key on the three tools (as each tool's page or REST resource does: a
    document names a secret, never holds one), then import the example with the command.
    Returns what the command printed."""
    for name in TOOLS:
        if not ToolDefinition.objects.filter(tenant=tenant, name=name).exists():
            tool_definition_save(
                tenant=tenant,
                changes={
                    "name": name,
                    "kind": "http",
                    "description": "Replaced by the example's import.",
                    "input_schema": {"type": "object"},
                    "config": {
                        "method": "GET",
                        "url": api.url + "/",
                        "auth": {"type": "header", "header": API_KEY_HEADER},
                    },
                    "secret": api.api_key,
                },
            )
    document = tmp_path / "booking.yaml"
    document.write_text(example_text(api.url), encoding="utf-8")
    out = io.StringIO()
    call_command("config", "import", "--tenant", tenant.slug, str(document), stdout=out)
    return out.getvalue()
