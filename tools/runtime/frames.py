"""A run's frame: what its tools returned, kept for the inputs other tools take from them
(`depends_on`), and the opaque references the model sees in place of server-owned ids.

- A tool that others depend on has its full result recorded (before `model_view` and
  references: what the service answered), by tool name, the latest winning.
- An input filled from the frame (`{"hold_id": {"from": "hold_slot", "path": "$.id"}}`) is
  not in the model's schema and is set by the runtime, whatever the model sent.
- A result path declared as a reference (`config.references: {"slots.*.id": "slot"}`) shows
  the model `slot#1`, `slot#2`... instead of the ids; an argument declared to take a
  reference (`arguments: [{argument: slot_id, reference: slot}]`) must be such a token of
  that kind, known to this frame, and is mapped back to the id before the request is made.
  So the model can neither see nor invent a real id.

The frame is plain data saved with the run's state (agents/runtime/state.py) and carried to
the next run of the same conversation, so tokens stay valid across turns and a worker crash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

KIND_PATTERN = r"^[a-z][a-z0-9_]{0,30}$"
_TOKEN = re.compile(r"^([a-z][a-z0-9_]{0,30})#([1-9][0-9]{0,8})$")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+|\*)\]")
MAX_TOKENS = 10_000  # per frame; the oldest go first (then they no longer resolve)
MAX_OUTPUT_CHARS = 200_000  # a result larger than this is not kept for dependants


class FrameError(Exception):
    """Why a call's inputs cannot be taken from the frame: its text is for the model."""


@dataclass(frozen=True)
class Source:
    """Where an input comes from: a field of another tool's result ($.id, $.items[0].id)."""

    tool: str
    path: str


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def value_at(data: Any, path: str) -> Any:
    """The value at `path` ($.a.b, $.items[0].id, $.items[*].id gives a list) of `data`;
    MISSING when it has no such field."""
    steps = [(m.group(1), m.group(2)) for m in _STEP.finditer(path[1:])]
    return _take(data, steps)


def _take(data: Any, steps: list[tuple[str | None, str | None]]) -> Any:
    if not steps:
        return data
    (key, index), rest = steps[0], steps[1:]
    if key is not None:
        if not isinstance(data, dict) or key not in data:
            return MISSING
        return _take(data[key], rest)
    if not isinstance(data, list):
        return MISSING
    if index == "*":
        taken = [_take(item, rest) for item in data]
        return [v for v in taken if v is not MISSING]
    position = int(index or 0)
    return _take(data[position], rest) if position < len(data) else MISSING


@dataclass
class Frame:
    outputs: dict[str, Any] = field(default_factory=dict)  # tool name -> its full result
    tokens: dict[str, Any] = field(default_factory=dict)  # "slot#2" -> the real value

    def __post_init__(self) -> None:
        self._by_value: dict[tuple[str, str], str] = {}
        self._next: dict[str, int] = {}
        for token, value in self.tokens.items():
            kind, number = _TOKEN.match(token).groups()  # type: ignore[union-attr]
            self._by_value[(kind, _key(value))] = token
            self._next[kind] = max(self._next.get(kind, 1), int(number) + 1)

    def __bool__(self) -> bool:
        return bool(self.outputs or self.tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"outputs": self.outputs, "tokens": self.tokens}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Frame:
        if not data:
            return cls()
        tokens = {k: v for k, v in data.get("tokens", {}).items() if _TOKEN.match(k)}
        return cls(outputs=dict(data.get("outputs", {})), tokens=tokens)

    # -- results -------------------------------------------------------------------
    def record(self, tool: str, data: Any) -> None:
        """Keep `tool`'s full result for the tools that take inputs from it."""
        if len(json.dumps(data, default=str)) > MAX_OUTPUT_CHARS:
            self.outputs.pop(tool, None)  # an older, smaller one would be stale
            return
        self.outputs[tool] = data

    def shown(self, data: Any, references: Mapping[str, str]) -> Any:
        """`data` with the values at each reference path ("slots.*.id", model_view's
        syntax) replaced by their tokens; `data` itself is left as it is."""
        for path, kind in references.items():
            data = _replace(data, path.split(".") if path not in ("", ".") else [], kind, self)
        return data

    def token(self, kind: str, value: Any) -> str:
        key = (kind, _key(value))
        if key in self._by_value:
            return self._by_value[key]
        number = self._next.get(kind, 1)
        token = f"{kind}#{number}"
        self._next[kind] = number + 1
        self.tokens[token] = value
        self._by_value[key] = token
        while len(self.tokens) > MAX_TOKENS:
            oldest = next(iter(self.tokens))
            self._by_value.pop((oldest.split("#")[0], _key(self.tokens.pop(oldest))), None)
        return token

    # -- inputs --------------------------------------------------------------------
    def inputs(
        self,
        arguments: Mapping[str, Any],
        depends_on: Mapping[str, Source],
        reference_inputs: Mapping[str, str],
    ) -> tuple[dict[str, Any], list[tuple[str, Source]]]:
        """The arguments a call runs with: references mapped back to their values, and
        each `depends_on` input set from the frame. Returns them with the inputs the frame
        has no value for yet (their producer has not run). FrameError for a reference
        argument that is not a known token of its kind."""
        filled = dict(arguments)
        for name, kind in reference_inputs.items():
            if name in filled and name not in depends_on:
                filled[name] = self._resolve(name, filled[name], kind)
        missing = []
        for name, source in depends_on.items():
            output = self.outputs.get(source.tool, MISSING)
            value = MISSING if output is MISSING else value_at(output, source.path)
            if value is MISSING:
                filled.pop(name, None)  # never the model's
                missing.append((name, source))
            else:
                filled[name] = value
        return filled, missing

    def completed(
        self,
        arguments: Mapping[str, Any],
        depends_on: Mapping[str, Source],
        reference_inputs: Mapping[str, str],
    ) -> dict[str, Any]:
        """`inputs`, when every one has a value; FrameError saying which producer to call
        first otherwise."""
        filled, missing = self.inputs(arguments, depends_on, reference_inputs)
        if missing:
            name, source = missing[0]
            raise FrameError(not_produced(name, source))
        return filled

    def _resolve(self, name: str, value: Any, kind: str) -> Any:
        example = f"{kind}#1"
        if not isinstance(value, str) or not _TOKEN.match(value):
            raise FrameError(
                f"{name!r} takes a {kind} reference such as {example!r}, as a tool's result "
                "showed it; ids cannot be given directly"
            )
        if not value.startswith(f"{kind}#"):
            raise FrameError(f"{name!r} takes a {kind} reference ({example}), not {value!r}")
        if value not in self.tokens:
            raise FrameError(
                f"unknown reference {value!r}: use one a tool's result showed in this conversation"
            )
        return self.tokens[value]


def not_produced(name: str, source: Source) -> str:
    """Why an input taken from another tool's result has no value: for the model."""
    return (
        f"{name!r} is taken from the result of {source.tool}, which has not given one in "
        f"this conversation: call {source.tool} first"
    )


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _replace(data: Any, steps: list[str], kind: str, frame: Frame) -> Any:
    """A copy of `data` with the value at `steps` given its token (scalars only)."""
    if not steps:
        if isinstance(data, (str, int, float)) and not isinstance(data, bool):
            return frame.token(kind, data)
        return data
    head, rest = steps[0], steps[1:]
    if head == "*":
        return (
            [_replace(item, rest, kind, frame) for item in data] if isinstance(data, list) else data
        )
    if isinstance(data, dict) and head in data:
        return {**data, head: _replace(data[head], rest, kind, frame)}
    if (
        isinstance(data, list)
        and head.lstrip("-").isdigit()
        and -len(data) <= int(head) < len(data)
    ):
        copy = list(data)
        copy[int(head)] = _replace(copy[int(head)], rest, kind, frame)
        return copy
    return data
