"""The workflow document's compiler (agents/runtime/declared_workflows): good documents
compile to the runtime's steps and run; hostile ones are refused, each problem at its path.
Tools of our own and FakeModel: no network, no database."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agents.runtime.declared_workflows.expressions import parse
from agents.runtime.spec import AgentSpec
from agents.runtime.workflow import WorkflowContext, WorkflowFailed
from agents.workflows import (
    CompiledWorkflow,
    ToolSchemas,
    WorkflowInvalid,
    compile_definition,
    definition_references,
    workflow_json_schema,
)
from providers.runtime.fake import FakeModel
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Tool

CTX = RunContext(tenant_id=1, user_id=7, run_id="run_1")
CALLS: list[tuple[str, dict[str, Any]]] = []


def geocode(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    CALLS.append(("geocode", arguments))
    return {"lat": 48.85, "lon": 2.35, "name": arguments["name"]}


def forecast(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    CALLS.append(("forecast", arguments))
    return {"rain_mm": 3 if arguments["lat"] > 40 else 0, "summary": "showers"}


GEOCODE = Tool(
    name="geocode",
    description="Where a place is.",
    input_schema={
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
    },
    handler=geocode,
)
FORECAST = Tool(
    name="forecast",
    description="Tomorrow's weather.",
    input_schema={
        "type": "object",
        "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
        "required": ["lat", "lon"],
    },
    handler=forecast,
)
REGISTRY = ToolRegistry([GEOCODE, FORECAST])
TOOLS = {"geocode": GEOCODE, "forecast": FORECAST}
ADVISOR = AgentSpec(name="advisor", instructions="Advise.", model="fake-model")
AGENTS = {"advisor": ADVISOR}

WEATHER = {
    "input": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "output": {"type": "object", "required": ["advice", "place"]},
    "steps": [
        {"id": "place", "tool": "geocode", "arguments": {"name": "input.city"}},
        {"id": "weather", "tool": "forecast", "arguments": "{lat: place.lat, lon: place.lon}"},
        {
            "id": "advice",
            "branch": {
                "if": "weather.rain_mm > `0`",
                "then": [{"id": "umbrella", "agent": "advisor", "prompt": "weather.summary"}],
                "else": [{"id": "dry", "transform": "'No rain.'"}],
            },
        },
        {
            "id": "both",
            "parallel": {
                "city": [{"id": "upper", "transform": "input.city"}],
                "size": [{"id": "letters", "transform": "length(input.city)"}],
            },
        },
        {"id": "answer", "transform": "{advice: advice, place: both.city, size: both.size}"},
    ],
}


def compiled(definition: dict[str, Any], **known: Any) -> CompiledWorkflow:
    return compile_definition(
        definition, tools=known.get("tools", TOOLS), agents=known.get("agents", AGENTS)
    )


def problems(definition: Any, **known: Any) -> dict[str, str]:
    with pytest.raises(WorkflowInvalid) as caught:
        compiled(definition, **known)
    return {p.path: p.reason for p in caught.value.problems}


def run(workflow: CompiledWorkflow, value: Any, model: FakeModel | None = None) -> Any:
    context = WorkflowContext(
        registry=REGISTRY, ctx=CTX, adapter_for=(lambda spec: model) if model else None
    )
    return asyncio.run(workflow.workflow.run(value, context))


# -- good documents ----------------------------------------------------------------------
def test_a_document_compiles_to_the_runtime_steps_and_runs() -> None:
    CALLS.clear()
    workflow = compiled(WEATHER)
    model = FakeModel(["Take an umbrella."])

    answer = run(workflow, {"city": "Paris"}, model)

    assert answer == {"advice": "Take an umbrella.", "place": "Paris", "size": 5}
    assert CALLS == [("geocode", {"name": "Paris"}), ("forecast", {"lat": 48.85, "lon": 2.35})]
    assert model.requests[0].messages[-1].text == "showers"
    assert [step.label for step in workflow.workflow.steps] == [
        "input", "place", "weather", "advice", "both", "answer", "output",
    ]  # fmt: skip
    assert workflow.references.tools == {"geocode", "forecast"}
    assert workflow.references.agents == {"advisor"}


def test_the_other_arm_runs_when_the_condition_is_false_and_no_else_gives_null() -> None:
    dry = {
        "steps": [
            {"id": "wet", "transform": "input.rain"},
            {"id": "advice", "branch": {"if": "wet", "then": [{"id": "u", "transform": "'u'"}]}},
            {"id": "out", "transform": "{advice: advice, wet: wet}"},
        ]
    }
    assert run(compiled(dry), {"rain": 0}) == {"advice": "u", "wet": 0}  # 0 is true
    assert run(compiled(dry), {"rain": []}) == {"advice": None, "wet": []}


def test_the_input_and_the_output_are_checked_when_it_runs() -> None:
    workflow = compiled(WEATHER)
    with pytest.raises(WorkflowFailed, match="step 'input' failed: the workflow's input"):
        run(workflow, {"city": 3})

    typed = {
        "output": {"type": "integer"},
        "steps": [{"id": "n", "transform": "input.n"}],
    }
    assert run(compiled(typed), {"n": 4}) == 4
    with pytest.raises(WorkflowFailed, match="step 'output' failed: the workflow's output"):
        run(compiled(typed), {"n": "four"})


def test_a_tool_that_is_only_known_by_its_schemas_compiles_for_a_save() -> None:
    known = {"geocode": ToolSchemas(GEOCODE.input_schema, GEOCODE.output_schema)}
    doc = {"steps": [{"id": "place", "tool": "geocode", "arguments": {"name": "input.city"}}]}
    assert compiled(doc, tools=known).references.tools == {"geocode"}


def test_references_read_the_names_without_compiling() -> None:
    refs = definition_references(WEATHER)
    assert (refs.tools, refs.agents) == ({"geocode", "forecast"}, {"advisor"})
    assert definition_references({"steps": "nope"}).tools == frozenset()


def test_the_published_schema_describes_every_step_kind() -> None:
    text = json.dumps(workflow_json_schema())
    for kind in ("ToolStepEntry", "AgentStepEntry", "TransformStepEntry", "ParallelStepEntry"):
        assert kind in text
    assert '"if"' in text and '"else"' in text


# -- problems at their paths -------------------------------------------------------------
def test_unknown_tools_and_agents_are_refused_at_their_path() -> None:
    found = problems(
        {
            "steps": [
                {"id": "a", "tool": "teleport"},
                {"id": "b", "agent": "oracle", "prompt": "input"},
            ]
        }
    )
    assert found == {
        "steps[0].tool": "no tool named 'teleport'",
        "steps[1].agent": "no agent 'oracle'",
    }


def test_names_not_in_scope_are_refused_saying_why() -> None:
    found = problems(
        {
            "steps": [
                {"id": "a", "transform": "b.x"},
                {"id": "b", "transform": "b"},
                {"id": "c", "transform": "nothing"},
                {"id": "p", "parallel": {"one": [{"id": "inner", "transform": "p"}]}},
                {"id": "d", "transform": "inner"},
                {"id": "e", "transform": "input[*].a"},  # `a` reads the items: fine
            ]
        }
    )
    assert found == {
        "steps[0].transform": "reads 'b', the output of a step that runs later (steps[1])",
        "steps[1].transform": "reads 'b', its own output (a cycle)",
        "steps[2].transform": "reads 'nothing', which is neither input nor a step's id",
        "steps[3].parallel.one[0].transform": "reads 'p', its own output (a cycle)",
        "steps[4].transform": "reads 'inner', a step inside another parallel branch or branch arm",
    }


def test_a_parallel_branch_does_not_see_its_sibling() -> None:
    found = problems(
        {
            "steps": [
                {
                    "id": "p",
                    "parallel": {
                        "one": [{"id": "x", "transform": "input"}],
                        "two": [{"id": "y", "transform": "x"}],
                    },
                }
            ]
        }
    )
    assert found == {
        "steps[0].parallel.two[0].transform": (
            "reads 'x', a step inside another parallel branch or branch arm"
        )
    }


def test_duplicate_and_reserved_ids_are_refused() -> None:
    found = problems(
        {
            "steps": [
                {"id": "a", "transform": "input"},
                {"id": "b", "branch": {"if": "a", "then": [{"id": "a", "transform": "a"}]}},
                {"id": "input", "transform": "a"},
            ]
        }
    )
    assert found["steps[1].branch.then[0].id"] == "duplicate id 'a' (also steps[0])"
    assert "workflow's input" in found["steps[2].id"]
    # A structural problem is reported alone: the rest cannot be read without the structure.
    found = problems(
        {"steps": [{"id": "a", "transform": "zz"}, {"id": "Bad-Id", "transform": "a"}]}
    )
    assert list(found) == ["steps[1].id"] and found["steps[1].id"].startswith("an id is lower")


def test_type_mismatches_are_refused_where_both_types_are_known() -> None:
    found = problems(
        {
            "input": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "output": {"type": "string"},
            "steps": [
                {"id": "place", "tool": "geocode", "arguments": {"name": "input.n"}},
                {"id": "w", "tool": "forecast", "arguments": {"lat": "place.lat", "alt": "`1`"}},
                {"id": "whole", "tool": "forecast", "arguments": "length(input)"},
                {"id": "extra", "tool": "geocode", "arguments": {"name": "'x'", "zoom": "`2`"}},
                {"id": "last", "transform": "{a: `1`}"},
            ],
        }
    )
    assert found == {
        "steps[0].arguments.name": "tool 'geocode''s argument 'name' expects string, gets integer",
        "steps[1].arguments": "tool 'forecast' needs 'lon'",
        "steps[2].arguments": "the tool's arguments expects object, gets integer",
        "steps[3].arguments.zoom": "tool 'geocode' has no argument 'zoom'",
        "output": "the declared output expects string, gets object (from step 'last')",
    }


def test_an_output_missing_a_required_property_is_refused() -> None:
    found = problems(
        {
            "output": {"type": "object", "required": ["total"]},
            "steps": [{"id": "last", "transform": "{sum: `1`}"}],
        }
    )
    assert found == {
        "output": "the declared output needs the property 'total', which is not given "
        "(from step 'last')"
    }


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("input.(", "the expression does not parse"),
        ("teleport(input)", "JMESPath has no function teleport()"),
        ("length(input, input)", "length() takes 1 argument(s), not 2"),
        ("(" * 3000, "at most 2000 characters"),
        ("(" * 990 + "input" + ")" * 990, "nests too deeply"),
        ("[" * 150 + "input" + "]" * 150, "nests deeper than 100"),
    ],
)
def test_expressions_that_do_not_parse_are_refused(expression: str, reason: str) -> None:
    found = problems({"steps": [{"id": "a", "transform": expression}]})
    assert reason in found["steps[0].transform"]


def test_bad_schemas_and_structure_are_refused_at_their_path() -> None:
    assert (
        problems({"input": {"type": "string"}, "steps": [{"id": "a", "transform": "input"}]})[
            "input"
        ]
        == 'input must have "type": "object"'
    )
    assert "output.type" in problems(
        {"output": {"type": "banana"}, "steps": [{"id": "a", "transform": "input"}]}
    )
    found = problems({"steps": [{"id": "a", "tool": "geocode", "agent": "advisor"}, {"id": "b"}]})
    assert set(found) == {"steps[0]", "steps[1]"}
    assert problems({"steps": []}) == {
        "steps": "List should have at least 1 item after validation, not 0"
    }
    assert problems({"steps": [{"id": "a", "transform": "input", "eval": "os.system"}]}) == {
        "steps[0].eval": "unknown field"
    }
    assert problems(["not", "an", "object"]) == {"": "a workflow is a JSON object"}


# -- hostile documents -------------------------------------------------------------------
def test_a_huge_document_is_refused_before_it_is_read() -> None:
    steps = [{"id": f"s{i}", "transform": "input"} for i in range(5000)]
    assert "at most 100000" in problems({"steps": steps})[""]


def test_too_many_steps_are_refused() -> None:
    steps = [{"id": f"s{i}", "transform": "input"} for i in range(101)]
    assert problems({"steps": steps}) == {"steps": "101 steps; at most 100"}


def test_deep_nesting_is_refused_whether_json_or_steps() -> None:
    deep: Any = {"x": 1}
    for _ in range(10_000):
        deep = {"x": deep}
    assert "nests deeper" in problems({"input": deep, "steps": []})[""]

    step: dict[str, Any] = {"id": "leaf", "transform": "input"}
    for level in range(7):
        step = {"id": f"b{level}", "branch": {"if": "input", "then": [step]}}
    found = problems({"steps": [step]})
    assert all("nest deeper than 5" in reason for reason in found.values())
    assert len(found) == 2  # the two steps below the fifth level


def test_too_many_problems_are_capped() -> None:
    steps = [{"id": f"s{i}", "tool": "nope"} for i in range(80)]
    found = problems({"steps": steps})
    assert len(found) == 51 and found[""] == "and 30 more problems"


def test_an_expression_that_multiplies_its_value_fails_its_step_not_the_process() -> None:
    doubling = " | ".join(["[@, @]"] * 60)
    workflow = compiled(
        {"steps": [{"id": "big", "transform": f"input | {doubling} | to_string(@)"}]}
    )
    with pytest.raises(WorkflowFailed, match="too large"):
        run(workflow, {"a": 1})
    flat = compiled({"steps": [{"id": "big", "transform": f"input | {doubling} | [][][][][][]"}]})
    with pytest.raises(WorkflowFailed, match="step 'big' failed"):
        run(flat, {"a": 1})


def test_a_function_given_the_wrong_type_fails_its_step_with_a_sentence() -> None:
    workflow = compiled({"steps": [{"id": "n", "transform": "length(input.n)"}]})
    with pytest.raises(
        WorkflowFailed, match=r"'length\(input.n\)': length\(\) cannot take a number"
    ):
        run(workflow, {"n": 5})


def test_a_tool_arguments_expression_must_give_an_object() -> None:
    workflow = compiled({"steps": [{"id": "p", "tool": "geocode", "arguments": "input.name"}]})
    with pytest.raises(WorkflowFailed, match="are not an object"):
        run(workflow, {"name": "Paris"})


def test_an_agent_step_gets_data_as_json() -> None:
    model = FakeModel(["ok"])
    doc = {"steps": [{"id": "a", "agent": "advisor", "prompt": "{city: input.city}"}]}
    assert run(compiled(doc), {"city": "Paris"}, model) == "ok"
    assert json.loads(model.requests[0].messages[-1].text) == {"city": "Paris"}


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("input.a", {"input"}),
        ("input | a", {"input"}),  # `a` reads what the pipe gives
        ("input.items[?price > limit].name", {"input"}),  # inside the filter: each item
        ("sort_by(input.items, &price)", {"input"}),  # `&price` reads each item
        ("{x: place.lat, y: input}", {"place", "input"}),
        ("[place, weather][0]", {"place", "weather"}),
        ("place || weather", {"place", "weather"}),
        ("@", set()),
    ],
)
def test_the_names_an_expression_reads_from_the_scope(expression: str, names: set[str]) -> None:
    assert {name for name, _node in parse(expression).root_names()} == names


def test_a_step_after_a_parallel_reads_its_branches_by_name() -> None:
    doc = {
        "output": {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "t": {"type": "string"}},
        },
        "steps": [
            {
                "id": "p",
                "parallel": {
                    "n": [{"id": "count", "transform": "length(input.text)"}],
                    "t": [{"id": "same", "transform": "input.text"}],
                },
            },
            {"id": "out", "transform": "{n: p.n, t: p.t}"},
        ],
    }
    assert run(compiled(doc), {"text": "abc"}) == {"n": 3, "t": "abc"}
    doc["output"]["properties"]["n"] = {"type": "string"}
    assert problems(doc) == {
        "output": "the declared output property 'n' expects string, gets integer (from step 'out')"
    }
