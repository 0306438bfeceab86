"""A workflow document -> the runtime's steps (agents/runtime/workflow.py), checked.

`compile_definition(definition, tools=..., agents=...)` is asked when a workflow is saved
and when it runs: what it knows of the tenant (its tools' schemas, its agents' specs) is
passed in. It reports every problem it finds, each at its path (`steps[2].tool`,
`steps[1].parallel.a[0].arguments.city`): the structure, bounds (size, nesting, steps),
ids (their form, duplicates), unknown tools and agents, expressions that do not parse,
references to names not in scope (unknown, a later step, the step itself, a step inside
another branch), and types where both sides are known (a tool's arguments against its
input schema, the declared output against the last step's output).

The compiled workflow passes a scope from step to step: `{"input": ..., "<id>": output}`.
Tool and agent steps are the runtime's own with `into=<id>`; a transform stores its value
under its id; a parallel step's branches each run on the scope and a join transform keeps
the scope with `{branch: its last output}` under the step's id; a branch's arms end with
a transform keeping the scope with the arm's last output under the branch's id. The first
step checks the input against its schema and makes the scope; the last returns the last
step's output, checked against the output schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import pydantic

import agents.runtime.declared_workflows.inference as inference
from agents.runtime.declared_workflows import step_calls
from agents.runtime.declared_workflows.document import (
    AgentStepEntry,
    BranchStepEntry,
    ParallelStepEntry,
    ToolStepEntry,
    TransformStepEntry,
    WorkflowDocument,
)
from agents.runtime.declared_workflows.expressions import Expression, ExpressionInvalid, parse
from agents.runtime.spec import AgentSpec
from agents.runtime.workflow import (
    AgentStep,
    Branch,
    Parallel,
    Step,
    ToolStep,
    Transform,
    Workflow,
)
from tools.runtime.context import ConfigurationError
from tools.runtime.validation import SchemaError, check_schema

MAX_DOCUMENT_CHARS = 100_000  # the document as compact JSON
MAX_JSON_DEPTH = 64  # lists and objects within each other, before the shapes are read
MAX_STEPS = 100  # every step, nested ones included
MAX_NESTING = 5  # parallel and branch steps within each other
MAX_BRANCHES = 10  # of one parallel step
MAX_PROBLEMS = 50  # reported at most; the rest are counted
RESERVED_IDS = frozenset({"input"})


@dataclass(frozen=True)
class WorkflowProblem:
    path: str  # where in the document: "steps[2].tool"; "" for the whole document
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


class WorkflowInvalid(ConfigurationError):
    """The document cannot be compiled; `problems` lists every reason, each at its path."""

    def __init__(self, problems: list[WorkflowProblem]) -> None:
        self.problems = problems
        first = problems[0] if problems else WorkflowProblem("", "invalid")
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{first.path or 'workflow'}: {first.reason}{more}")


class ToolSignature(Protocol):
    """What the compiler reads of a tool (a runtime Tool has both); None: not known, so
    not checked."""

    @property
    def input_schema(self) -> Mapping[str, Any] | None: ...

    @property
    def output_schema(self) -> Mapping[str, Any] | None: ...


@dataclass(frozen=True)
class ToolSchemas:
    """A tool's signature without the tool (None: a tool known by its name only)."""

    input_schema: Mapping[str, Any] | None = None
    output_schema: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class References:
    tools: frozenset[str]
    agents: frozenset[str]


@dataclass(frozen=True)
class CompiledWorkflow:
    workflow: Workflow  # run it with `await workflow.run(input, WorkflowContext(...))`
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    references: References
    document: WorkflowDocument


def compile_definition(
    definition: Any,
    *,
    tools: Mapping[str, ToolSignature],
    agents: Mapping[str, AgentSpec | None],
    label: str = "workflow",
) -> CompiledWorkflow:
    """The workflow of `definition`, checked; WorkflowInvalid with every problem found.
    `tools` maps tool names to their schemas, `agents` agent slugs to their specs (None:
    the agent exists but its spec is not given — a check, since such a step cannot run:
    the configuration document's compiler knows some agents by their slug only)."""
    document = _read(definition)
    compiler = _Compiler(tools=tools, agents=agents)
    compiled = compiler.compile(document, label)
    if compiler.problems:
        raise WorkflowInvalid(compiler.reported())
    return compiled


def definition_references(definition: Any) -> References:
    """The tools and agents a document names (empty when it does not read): what a caller
    must give `compile_definition`, so it builds no more than those."""
    try:
        document = _read(definition)
    except WorkflowInvalid:
        return References(frozenset(), frozenset())
    return _references(document)


def _references(document: WorkflowDocument) -> References:
    tools: set[str] = set()
    agents: set[str] = set()
    for entry, _path, _depth in _walk(document.steps, "steps", 0):
        if isinstance(entry, ToolStepEntry):
            tools.add(entry.tool)
        elif isinstance(entry, AgentStepEntry):
            agents.add(entry.agent)
    return References(frozenset(tools), frozenset(agents))


def _read(definition: Any) -> WorkflowDocument:
    """The structure: bounds first (cheap, iterative), then the shapes."""
    if not isinstance(definition, dict):
        raise WorkflowInvalid([WorkflowProblem("", "a workflow is a JSON object")])
    if _json_depth(definition) > MAX_JSON_DEPTH:
        raise WorkflowInvalid([WorkflowProblem("", f"nests deeper than {MAX_JSON_DEPTH} levels")])
    try:
        size = len(json.dumps(definition, separators=(",", ":")))
    except (TypeError, ValueError):
        raise WorkflowInvalid([WorkflowProblem("", "a workflow is JSON")]) from None
    if size > MAX_DOCUMENT_CHARS:
        reason = f"is {size} characters as JSON; at most {MAX_DOCUMENT_CHARS}"
        raise WorkflowInvalid([WorkflowProblem("", reason)])
    try:
        return WorkflowDocument.model_validate(definition)
    except pydantic.ValidationError as exc:
        problems = [
            WorkflowProblem(_path(error["loc"]), _message(error))
            for error in exc.errors(include_url=False, include_input=False)
        ]
        raise WorkflowInvalid(_capped(problems)) from None


def _json_depth(value: Any) -> int:
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            items = node.values() if isinstance(node, dict) else node
            stack.extend((item, depth + 1) for item in items)
    return deepest


_KIND_TAGS = frozenset({"tool", "agent", "transform", "parallel", "branch"})


def _path(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a document path: ("steps", 2, "tool", "arguments") ->
    "steps[2].arguments" (the union's tag, after an index, is not part of the document)."""
    path = ""
    previous: Any = None
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(previous, int) and part in _KIND_TAGS:
            pass  # the discriminator's tag
        elif part in ("str", "dict[str,constrained-str]"):
            pass  # a union member's name (`arguments`)
        else:
            path += f".{part}" if path else str(part)
        previous = part
    return path


def _message(error: Any) -> str:
    if error["type"] == "string_pattern_mismatch":
        return "an id is lower-case letters, digits and _, starting with a letter (at most 50)"
    if error["type"] == "extra_forbidden":
        return "unknown field"
    return str(error["msg"])


def _capped(problems: list[WorkflowProblem]) -> list[WorkflowProblem]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    rest = len(problems) - MAX_PROBLEMS
    return [*problems[:MAX_PROBLEMS], WorkflowProblem("", f"and {rest} more problems")]


def _walk(steps: list[Any], path: str, depth: int):
    """Every step entry with its path and nesting depth, in document order."""
    for index, entry in enumerate(steps):
        here = f"{path}[{index}]"
        yield entry, here, depth
        if isinstance(entry, ParallelStepEntry):
            for key, branch in entry.parallel.items():
                yield from _walk(branch, f"{here}.parallel.{key}", depth + 1)
        elif isinstance(entry, BranchStepEntry):
            yield from _walk(entry.branch.then, f"{here}.branch.then", depth + 1)
            if entry.branch.otherwise is not None:
                yield from _walk(entry.branch.otherwise, f"{here}.branch.else", depth + 1)


@dataclass
class _Scope:
    """The names a step may read, with their schemas (None: unknown), in order."""

    names: dict[str, inference.Schema]

    def plus(self, name: str, schema: inference.Schema) -> _Scope:
        return _Scope({**self.names, name: schema})


class _Compiler:
    def __init__(
        self, *, tools: Mapping[str, ToolSignature], agents: Mapping[str, AgentSpec | None]
    ) -> None:
        self.tools = tools
        self.agents = agents
        self.problems: list[WorkflowProblem] = []
        self.ids: dict[str, str] = {}  # every step id -> its path

    def problem(self, path: str, reason: str) -> None:
        self.problems.append(WorkflowProblem(path, reason))

    def reported(self) -> list[WorkflowProblem]:
        return _capped(self.problems)

    def compile(self, document: WorkflowDocument, label: str) -> CompiledWorkflow:
        input_schema = self.schema(document.input, "input", must_be_object=True)
        output_schema = None
        if document.output is not None:
            output_schema = self.schema(document.output, "output", must_be_object=False)
        self.check_bounds_and_ids(document)
        scope = _Scope({"input": input_schema})
        steps, last_id, last_schema = self.sequence(document.steps, "steps", scope)
        if output_schema is not None:
            why = inference.mismatch(output_schema, last_schema)
            if why:
                self.problem("output", f"the declared output {why} (from step {last_id!r})")
        references = _references(document)
        workflow = Workflow(
            steps=(
                Transform(step_calls.Begin(input_schema), label="input"),
                *steps,
                Transform(step_calls.End(last_id, output_schema), label="output"),
            ),
            label=label,
        )
        return CompiledWorkflow(workflow, input_schema, output_schema, references, document)

    def schema(self, schema: dict[str, Any], path: str, *, must_be_object: bool) -> dict[str, Any]:
        declared = schema.get("type")
        # check_schema wants an object schema; an output may be any type, so its own `type`
        # is checked here and the rest as if it described an object.
        checked = schema if must_be_object or declared is None else {**schema, "type": "object"}
        if not must_be_object and declared is not None and inference.types_of(schema) is None:
            self.problem(f"{path}.type", "a JSON type or a list of JSON types")
            return {}
        refusal = _schema_refusal(path, json.dumps(checked, sort_keys=True))
        if refusal is not None:
            self.problem(path, refusal)
            return {}
        return schema

    def check_bounds_and_ids(self, document: WorkflowDocument) -> None:
        count = 0
        for entry, path, depth in _walk(document.steps, "steps", 0):
            count += 1
            if depth > MAX_NESTING:
                self.problem(path, f"steps nest deeper than {MAX_NESTING} parallel or branch steps")
            if isinstance(entry, ParallelStepEntry) and len(entry.parallel) > MAX_BRANCHES:
                self.problem(f"{path}.parallel", f"at most {MAX_BRANCHES} branches")
            if entry.id in RESERVED_IDS:
                self.problem(f"{path}.id", f"{entry.id!r} is the workflow's input; choose another")
            elif entry.id in self.ids:
                self.problem(f"{path}.id", f"duplicate id {entry.id!r} (also {self.ids[entry.id]})")
            else:
                self.ids[entry.id] = path
        if count > MAX_STEPS:
            self.problem("steps", f"{count} steps; at most {MAX_STEPS}")

    # -- steps -------------------------------------------------------------------------
    def sequence(
        self, entries: list[Any], path: str, scope: _Scope
    ) -> tuple[list[Step], str, inference.Schema]:
        """The runtime steps of `entries`, the last one's id and its output's schema."""
        steps: list[Step] = []
        last_id, last_schema = "input", scope.names.get("input")
        for index, entry in enumerate(entries):
            here = f"{path}[{index}]"
            step, schema = self.step(entry, here, scope)
            steps.append(step)
            scope = scope.plus(entry.id, schema)
            last_id, last_schema = entry.id, schema
        return steps, last_id, last_schema

    def step(self, entry: Any, path: str, scope: _Scope) -> tuple[Step, inference.Schema]:
        if isinstance(entry, ToolStepEntry):
            return self.tool_step(entry, path, scope)
        if isinstance(entry, AgentStepEntry):
            return self.agent_step(entry, path, scope)
        if isinstance(entry, TransformStepEntry):
            expression, schema = self.expression(entry.transform, f"{path}.transform", scope)
            return Transform(step_calls.Store(entry.id, expression), label=entry.id), schema
        if isinstance(entry, ParallelStepEntry):
            return self.parallel_step(entry, path, scope)
        assert isinstance(entry, BranchStepEntry)
        return self.branch_step(entry, path, scope)

    def tool_step(
        self, entry: ToolStepEntry, path: str, scope: _Scope
    ) -> tuple[Step, inference.Schema]:
        tool = self.tools.get(entry.tool)
        if tool is None:
            self.problem(f"{path}.tool", f"no tool named {entry.tool!r}")
        input_schema = tool.input_schema if tool is not None else None
        if isinstance(entry.arguments, str):
            expression, given = self.expression(entry.arguments, f"{path}.arguments", scope)
            why = inference.mismatch(input_schema or {"type": "object"}, given)
            if why:
                self.problem(f"{path}.arguments", f"the tool's arguments {why}")
            arguments: Callable[[Any], dict[str, Any]] = step_calls.Arguments(expression)
        else:
            expressions = {}
            for name, source in entry.arguments.items():
                where = f"{path}.arguments.{name}"
                expression, given = self.expression(source, where, scope)
                expressions[name] = expression
                if input_schema is not None:
                    self.argument_fits(entry.tool, input_schema, name, given, where)
            if input_schema is not None:
                required = input_schema.get("required") or []
                missing = [n for n in required if isinstance(n, str) and n not in expressions]
                if missing:
                    names = ", ".join(repr(n) for n in missing)
                    self.problem(f"{path}.arguments", f"tool {entry.tool!r} needs {names}")
            arguments = step_calls.NamedArguments(expressions)
        output = dict(tool.output_schema) if tool is not None and tool.output_schema else None
        step = ToolStep(name=entry.tool, arguments=arguments, into=entry.id, label=entry.id)
        return step, output

    def argument_fits(
        self, tool: str, schema: Mapping[str, Any], name: str, given: inference.Schema, path: str
    ) -> None:
        properties = schema.get("properties") or {}
        if name not in properties:
            if schema.get("additionalProperties") is False:
                self.problem(path, f"tool {tool!r} has no argument {name!r}")
            return
        why = inference.mismatch(properties[name], given)
        if why:
            self.problem(path, f"tool {tool!r}'s argument {name!r} {why}")

    def agent_step(
        self, entry: AgentStepEntry, path: str, scope: _Scope
    ) -> tuple[Step, inference.Schema]:
        expression, _ = self.expression(entry.prompt, f"{path}.prompt", scope)
        output: inference.Schema = None
        spec = self.agents.get(entry.agent)
        if entry.agent not in self.agents:
            self.problem(f"{path}.agent", f"no agent {entry.agent!r}")
        elif spec is not None:
            output = spec.output_schema if spec.output_schema is not None else {"type": "string"}
        if spec is None:  # a check only (see compile_definition)
            spec = AgentSpec(name=entry.agent, instructions="", model="")
        step = AgentStep(
            spec=spec, prompt=step_calls.Prompt(expression), into=entry.id, label=entry.id
        )
        return step, output

    def parallel_step(
        self, entry: ParallelStepEntry, path: str, scope: _Scope
    ) -> tuple[Step, inference.Schema]:
        branches: list[Step] = []
        lasts: dict[str, str] = {}
        properties: dict[str, Any] = {}
        for key, entries in entry.parallel.items():
            steps, last_id, last_schema = self.sequence(entries, f"{path}.parallel.{key}", scope)
            branches.append(Workflow(steps=tuple(steps), label=key))
            lasts[key] = last_id
            properties[key] = last_schema or {}
        join = step_calls.Join(entry.id, tuple(scope.names), lasts)
        step = Workflow(
            steps=(
                Parallel(branches=tuple(branches), keys=tuple(lasts), label="parallel"),
                Transform(join, label="join"),
            ),
            label=entry.id,
        )
        output = {"type": "object", "properties": properties, "additionalProperties": False}
        return step, output

    def branch_step(
        self, entry: BranchStepEntry, path: str, scope: _Scope
    ) -> tuple[Step, inference.Schema]:
        arms = entry.branch
        condition, _ = self.expression(arms.condition, f"{path}.branch.if", scope)
        kept = tuple(scope.names)
        then_steps, then_last, then_schema = self.sequence(arms.then, f"{path}.branch.then", scope)
        if_true = Workflow(
            steps=(*then_steps, Transform(step_calls.Keep(entry.id, kept, then_last), label="end")),
            label="then",
        )
        if arms.otherwise is None:
            if_false: Step = Transform(step_calls.Keep(entry.id, kept, None), label="else")
            else_schema: inference.Schema = {"type": "null"}
        else:
            else_steps, else_last, else_schema = self.sequence(
                arms.otherwise, f"{path}.branch.else", scope
            )
            if_false = Workflow(
                steps=(
                    *else_steps,
                    Transform(step_calls.Keep(entry.id, kept, else_last), label="end"),
                ),
                label="else",
            )
        step = Branch(step_calls.Condition(condition), if_true, if_false, label=entry.id)
        return step, _either(then_schema, else_schema)

    # -- expressions -------------------------------------------------------------------
    def expression(
        self, source: str, path: str, scope: _Scope
    ) -> tuple[Expression, inference.Schema]:
        """The parsed expression and the schema of its value (None: unknown); a problem at
        `path` for a parse error or each name it reads that is not in scope."""
        try:
            expression = parse(source)
        except ExpressionInvalid as exc:
            self.problem(path, str(exc))
            return _NULL, None
        ok = True
        for name, _node in expression.root_names():
            if name not in scope.names:
                ok = False
                self.problem(path, self.not_in_scope(name, path))
        if not ok:
            return expression, None
        return expression, inference.infer(expression.ast, inference.ROOT, scope.names)

    def not_in_scope(self, name: str, path: str) -> str:
        where = self.ids.get(name)
        if where is None:
            return f"reads {name!r}, which is neither input nor a step's id"
        if path.startswith(where + "."):
            return f"reads {name!r}, its own output (a cycle)"
        if _runs_before(where, path):
            return f"reads {name!r}, a step inside another parallel branch or branch arm"
        return f"reads {name!r}, the output of a step that runs later ({where})"


_NULL = parse("`null`")


@lru_cache(maxsize=1024)
def _schema_refusal(what: str, schema_json: str) -> str | None:
    """Why a JSON Schema (as canonical JSON text) is refused, or None: a pure function of
    the text, kept for the process — every save of a configuration object compiles the
    tenant's workflows again, and a check costs about a millisecond."""
    try:
        check_schema(json.loads(schema_json), what=what)
    except SchemaError as exc:
        return str(exc)
    return None


def _runs_before(a: str, b: str) -> bool:
    """Whether the step at path `a` comes before the one at path `b` in document order."""
    return _order_key(a) < _order_key(b)


def _order_key(path: str) -> list[Any]:
    key: list[Any] = []
    for part in path.replace("[", ".[").split("."):
        if part.startswith("[") and part.endswith("]"):
            key.append((0, int(part[1:-1]), ""))
        elif part:
            key.append((1, 0, part))
    return key


def _either(a: inference.Schema, b: inference.Schema) -> inference.Schema:
    ta, tb = inference.types_of(a), inference.types_of(b)
    if ta is None or tb is None:
        return None
    return {"type": sorted(ta | tb)}
