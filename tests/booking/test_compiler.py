"""The booking example at the compiler boundary (agents/runtime/config/compiler.py): the
document compiles to the contracts docs/constrained-execution.md describes, and each unsafe
change to it is refused at its exact path, with the reason."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from agents.runtime.config.compiler import ConfigInvalid, compile_config
from agents.runtime.config.loading import load_document
from tests.booking.example import EXAMPLE, TOOLS, example_data
from tools.runtime.tool import Effect

POLICY_REASON = (
    "This tool writes, and the tenant's policy requires confirmation for every tool that "
    "writes: require approval (confirmation) for it, or make it read-only."
)


def test_the_example_compiles_to_a_model_contract_without_the_runtime_s_inputs():
    compiled = compile_config(load_document(EXAMPLE.read_bytes(), format="yaml"))
    search, hold, confirm = (compiled.tools[n] for n in TOOLS)

    # The model is shown the name to book for; hold_id comes from hold_slot's result.
    assert confirm.model.input_schema == {
        "type": "object",
        "properties": {"name": {"type": "string", "description": "Who the booking is for."}},
        "required": ["name"],
    }
    assert hold.model.input_schema["properties"].keys() == {"slot_id"}
    assert search.model.input_schema["required"] == ["date"]

    run = confirm.execution
    assert (run.method, run.url, run.effect, run.idempotent) == (
        "POST", "https://booking.example.com/bookings", Effect.WRITE, False,
    )  # fmt: skip
    assert run.confirmation_required and not hold.execution.confirmation_required
    assert {k: (d.from_, d.path) for k, d in run.dependencies.items()} == {
        "hold_id": ("hold_slot", "$.id")
    }
    assert run.model_view == {"booking": "id", "status": "status", "name": "name"}
    assert search.execution.model_view == {"date": "date", "slots": "slots"}
    assert (run.auth.type, run.auth.header, run.auth.secret) == (
        "header", "X-API-Key", "tool:confirm_booking",
    )  # fmt: skip
    # Nothing of how a tool runs is in what the model is shown.
    shown = json.dumps([t.model.__dict__ for t in compiled.tools.values()])
    assert "booking.example.com" not in shown and "X-API-Key" not in shown


def _with_policy_and_no_confirmation(document: dict[str, Any]) -> None:
    document["policy"] = {"require_confirmation_for_writes": True}
    document["tools"][1]["confirmation"] = {"required": True}  # the policy wants it too
    del document["tools"][2]["confirmation"]


def _key_in_url(document: dict[str, Any]) -> None:
    document["tools"][0]["config"]["url"] += "?api_key=bk-test-7Hq2LmN4pR8s"


def _path(path: str) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        document["tools"][2]["depends_on"]["hold_id"]["path"] = path

    return change


def _producer(name: str) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        document["tools"][2]["depends_on"]["hold_id"]["from"] = name

    return change


def _reference_kind(kind: str) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        document["tools"][1]["config"]["arguments"][0]["reference"] = kind

    return change


@pytest.mark.parametrize(
    ("change", "path", "reason"),
    [
        pytest.param(
            _with_policy_and_no_confirmation, "tools[2].confirmation", POLICY_REASON,
            id="confirmation-dropped-under-the-tenant-policy",
        ),
        pytest.param(
            _key_in_url, "tools[0].config.url",
            "the URL's query parameter 'api_key' looks like a credential: keep it in the "
            "secret instead",
            id="api-key-in-the-url",
        ),
        pytest.param(
            _path("$.hold"), "tools[2].depends_on.hold_id.path",
            "'hold_slot''s output_schema has no field at $.hold",
            id="dependency-on-a-field-the-producer-lacks",
        ),
        pytest.param(
            _producer("search_slots"), "tools[2].depends_on.hold_id.path",
            "'search_slots''s output_schema has no field at $.id",
            id="dependency-on-the-wrong-producer",
        ),
        pytest.param(
            _reference_kind("room"), "tools[1].config.arguments[0].reference",
            "no tool's result gives room references (config.references of a tool)",
            id="reference-of-a-kind-no-result-gives",
        ),
    ],
)  # fmt: skip
def test_an_unsafe_change_to_the_example_is_refused_at_its_path(change, path, reason):
    document = copy.deepcopy(example_data())
    compile_config(copy.deepcopy(document))  # as shipped: valid
    change(document)
    with pytest.raises(ConfigInvalid) as refused:
        compile_config(document)
    assert [p.as_dict() for p in refused.value.problems] == [{"path": path, "reason": reason}]
