"""The run's frame, alone: values taken at paths, reference tokens shown and resolved."""

from __future__ import annotations

import pytest

from tools.runtime.frames import MAX_TOKENS, MISSING, Frame, FrameError, Source, value_at
from tools.runtime.tool import Tool, model_input_schema

pytestmark = pytest.mark.fast

RESULT = {"id": 7, "items": [{"id": "a"}, {"id": "b"}], "owner": {"name": "Ada"}}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("$", RESULT),
        ("$.id", 7),
        ("$.owner.name", "Ada"),
        ("$.items[1].id", "b"),
        ("$.items[*].id", ["a", "b"]),
        ("$.items[5].id", MISSING),
        ("$.nope", MISSING),
        ("$.id.deeper", MISSING),
    ],
)
def test_value_at(path, expected):
    assert value_at(RESULT, path) == expected


def test_inputs_are_filled_from_the_producer_and_the_model_cannot_set_them():
    frame = Frame()
    depends = {"customer_id": Source("find_customer", "$.id")}
    filled, missing = frame.inputs({"customer_id": 1, "text": "hi"}, depends, {})
    assert filled == {"text": "hi"} and missing == [("customer_id", depends["customer_id"])]

    frame.record("find_customer", {"id": 4711})
    filled, missing = frame.inputs({"customer_id": 1, "text": "hi"}, depends, {})
    assert filled == {"customer_id": 4711, "text": "hi"} and missing == []


def test_references_are_stable_opaque_and_map_back():
    frame = Frame()
    answer = {"slots": [{"id": "SLT-9f", "time": "09:00"}, {"id": "SLT-1c", "time": "10:00"}]}
    shown = frame.shown(answer, {"slots.*.id": "slot"})
    assert shown == {
        "slots": [{"id": "slot#1", "time": "09:00"}, {"id": "slot#2", "time": "10:00"}]
    }
    assert answer["slots"][0]["id"] == "SLT-9f"  # the result itself is left as it was
    again = frame.shown({"slots": [{"id": "SLT-1c"}]}, {"slots.*.id": "slot"})
    assert again == {"slots": [{"id": "slot#2"}]}  # the same id, the same token

    filled, _ = frame.inputs({"slot_id": "slot#2"}, {}, {"slot_id": "slot"})
    assert filled == {"slot_id": "SLT-1c"}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("SLT-9f", "ids cannot be given directly"),  # a real id, seen elsewhere or invented
        (42, "ids cannot be given directly"),
        ("hold#1", "takes a slot reference"),  # a known token of another kind
        ("slot#9", "unknown reference 'slot#9'"),  # invented
    ],
)
def test_a_reference_input_takes_only_a_known_token_of_its_kind(value, says):
    frame = Frame()
    frame.shown({"id": "SLT-9f"}, {"id": "slot"})
    frame.shown({"id": "HLD-1"}, {"id": "hold"})
    with pytest.raises(FrameError, match=says):
        frame.inputs({"slot_id": value}, {}, {"slot_id": "slot"})


def test_the_frame_survives_its_json_and_keeps_numbering():
    frame = Frame()
    frame.record("search", {"n": 1})
    frame.shown(["x", "y"], {"*": "item"})
    again = Frame.from_dict(frame.to_dict())
    assert again.outputs == {"search": {"n": 1}}
    assert again.shown(["y", "z"], {"*": "item"}) == ["item#2", "item#3"]
    assert Frame.from_dict({"tokens": {"bad token": 1}}).tokens == {}  # only well-formed ones


def test_tokens_are_bounded_oldest_first():
    frame = Frame()
    frame.shown(list(range(MAX_TOKENS + 5)), {"*": "n"})
    assert len(frame.tokens) == MAX_TOKENS and "n#1" not in frame.tokens
    with pytest.raises(FrameError, match="unknown reference"):
        frame.inputs({"x": "n#1"}, {}, {"x": "n"})


def test_a_huge_result_is_not_kept_for_dependants():
    frame = Frame()
    frame.record("big", {"small": True})
    frame.record("big", "x" * 300_000)
    assert "big" not in frame.outputs


def test_the_model_schema_hides_filled_inputs_and_describes_references():
    schema = {
        "type": "object",
        "properties": {
            "customer_id": {"type": "integer"},
            "slot_id": {"type": "string", "description": "The slot."},
            "text": {"type": "string"},
        },
        "required": ["customer_id", "slot_id", "text"],
    }
    shown = model_input_schema(schema, {"customer_id"}, {"slot_id": "slot"})
    assert set(shown["properties"]) == {"slot_id", "text"}
    assert shown["required"] == ["slot_id", "text"]
    assert shown["properties"]["slot_id"]["description"].startswith("The slot. A slot reference")
    assert "customer_id" in schema["properties"]  # the full schema validates what is sent

    item = Tool(
        name="note",
        description="Add a note.",
        input_schema=schema,
        handler=lambda arguments, ctx: None,
        depends_on={"customer_id": Source("find_customer", "$.id")},
        reference_inputs={"slot_id": "slot"},
    )
    assert item.model_schema == shown
