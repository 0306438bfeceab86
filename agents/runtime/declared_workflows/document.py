"""A workflow's document: its shapes (pydantic) and their published JSON Schema.

    input:  {JSON Schema of an object}      the workflow's input (default: any object)
    output: {JSON Schema}                   what it returns (optional): its last step's output
    steps:
      - id: place                           a step's output is in the scope as `place`
        tool: geocode
        arguments: {name: input.city}       each argument an expression (or one expression
                                            giving the whole object)
      - id: forecast
        tool: forecast
        arguments: "{lat: place.lat, lon: place.lon}"
      - id: rainy
        transform: forecast.rain_mm > `0`
      - id: advice
        branch:
          if: rainy
          then: [{id: umbrella, agent: umbrella-advisor, prompt: to_string(forecast)}]
          else: [{id: dry, transform: "'No rain today.'"}]
      - id: both
        parallel:
          weather: [{id: w, transform: forecast.summary}]
          clock: [{id: now, tool: current_time, arguments: {timezone: "'Europe/Paris'"}}]

Expressions are JMESPath (expressions.py) over the scope: `input` and the
outputs of the steps before, by id. The shapes check the structure; the compiler
(compiler.py) checks the rest: names, references, types, bounds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StringConstraints, Tag

from agents.runtime.declared_workflows.expressions import MAX_EXPRESSION_CHARS

STEP_KINDS = ("tool", "agent", "transform", "parallel", "branch")
ID_PATTERN = r"^[a-z][a-z0-9_]{0,49}$"  # a JMESPath identifier as it stands: no quoting

StepId = Annotated[
    str,
    StringConstraints(pattern=ID_PATTERN),
    Field(description="Unique in the workflow; the step's output is in the scope by this name."),
]
Expression = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_EXPRESSION_CHARS),
    Field(description="A JMESPath expression over the scope: input and earlier steps' outputs."),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ToolStepEntry(_Strict):
    """Call a tool of the tenant's; the output is the tool's result."""

    id: StepId
    tool: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    arguments: dict[str, Expression] | Expression = Field(
        default_factory=dict,
        description="Each argument's expression, or one expression giving the arguments object.",
    )


class AgentStepEntry(_Strict):
    """Run an agent of the tenant's (by slug) on a prompt; the output is its answer (its
    structured output when the agent has an output schema)."""

    id: StepId
    agent: Annotated[str, StringConstraints(min_length=1, max_length=50)]
    prompt: Expression = Field(description="Text is sent as is; other values as JSON.")


class TransformStepEntry(_Strict):
    """The expression's value is the step's output."""

    id: StepId
    transform: Expression


class ParallelStepEntry(_Strict):
    """Branches run concurrently on the same scope; the output is an object with each
    branch's last output under its name. A step inside a branch is seen only in it."""

    id: StepId
    parallel: dict[Annotated[str, StringConstraints(pattern=ID_PATTERN)], list[WorkflowStep]] = (
        Field(min_length=1)
    )


class BranchArms(_Strict):
    condition: Expression = Field(alias="if")
    then: list[WorkflowStep] = Field(min_length=1)
    otherwise: list[WorkflowStep] | None = Field(default=None, alias="else")


class BranchStepEntry(_Strict):
    """`then` runs when `if` is true (JMESPath's truth: false, null and empty values are
    false), else `else`; the output is the chosen arm's last output (null without `else`)."""

    id: StepId
    branch: BranchArms


def step_kind(value: Any) -> str | None:
    """Which kind a step is: the one of STEP_KINDS among its keys (None: not exactly one)."""
    if isinstance(value, BaseModel):
        value = value.__dict__
    if not isinstance(value, dict):
        return None
    kinds = [kind for kind in STEP_KINDS if kind in value]
    return kinds[0] if len(kinds) == 1 else None


WorkflowStep = Annotated[
    Annotated[ToolStepEntry, Tag("tool")]
    | Annotated[AgentStepEntry, Tag("agent")]
    | Annotated[TransformStepEntry, Tag("transform")]
    | Annotated[ParallelStepEntry, Tag("parallel")]
    | Annotated[BranchStepEntry, Tag("branch")],
    Discriminator(
        step_kind,
        custom_error_type="step_kind",
        custom_error_message="a step has exactly one of: " + ", ".join(STEP_KINDS),
    ),
]


class WorkflowDocument(_Strict):
    """A workflow: its typed input, its steps in order, its typed output."""

    version: Literal[1] = 1
    input: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object"},
        description="JSON Schema of the input, an object.",
    )
    output: dict[str, Any] | None = Field(
        default=None, description="JSON Schema of the output: the last step's output."
    )
    steps: list[WorkflowStep] = Field(min_length=1)


ParallelStepEntry.model_rebuild()
BranchArms.model_rebuild()
BranchStepEntry.model_rebuild()
WorkflowDocument.model_rebuild()


def workflow_json_schema() -> dict[str, Any]:
    """The published JSON Schema of a workflow document (docs/config-schema)."""
    schema = WorkflowDocument.model_json_schema(by_alias=True)
    schema["title"] = "Workflow"
    return schema
