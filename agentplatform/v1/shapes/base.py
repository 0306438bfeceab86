"""What every `/v1` wire shape is: a pydantic model whose JSON Schema is the OpenAPI
component of its name (agentplatform.v1.openapi), and which checks a request's body once
(`Shape.checked`) with the 400 a caller reads: the message and the `param` of the field at
fault, as OpenAI names them.

A field says its 400 with a `Refusal` in its annotation; the deepest refusal on the path of
the first error is the one answered (a field without one falls back to its parent's). Checks
that span fields or need the platform (a tool call answered, a schema usable, an image
fetched) stay with the parser that turns the checked shape into what a run takes.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, WithJsonSchema


class BadRequest(ValueError):
    """A 400 for the caller, naming the field at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Refusal:
    """A field's 400: `message`, or `by_error[<pydantic error type>]` where the kind of error
    says more (e.g. `too_long`); `param` when it is not the field's own path."""

    message: str
    param: str | None = None
    by_error: dict[str, str] = field(default_factory=dict)


REF = "#/components/schemas/{model}"  # where a shape's component is in the OpenAPI
UNICODE = "Text must be valid Unicode."  # a lone surrogate ("\ud800" in JSON)


class Shape(BaseModel):
    """A request or answer on the wire. Requests are strict (no "1" for 1, no `true` for
    1); fields not declared are allowed and ignored, as OpenAI's clients send many."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    @classmethod
    def checked(cls, body: dict[str, Any]) -> Self:
        """`body` (already parsed JSON) as this shape: one pass over it; a 400 otherwise."""
        try:
            return cls.model_validate(body)
        except ValidationError as exc:
            raise refusal(cls, exc.errors(include_url=False, include_input=False)[0]) from None


def refusal(shape: type[BaseModel], error: Any) -> BadRequest:
    """The 400 for pydantic's first error of `shape`: the deepest `Refusal` on its path."""
    loc = error["loc"]
    found: Refusal | None = None
    at = 0  # how much of `loc` the refusal found covers
    current: type[BaseModel] | None = shape
    for depth, step in enumerate(loc):
        if current is None or not isinstance(step, str) or step not in current.model_fields:
            break
        info = current.model_fields[step]
        for item in info.metadata:
            if isinstance(item, Refusal):
                found, at = item, depth + 1
        current = _shape_in(info.annotation)
    if error["type"] == "string_unicode":
        return BadRequest(UNICODE, param_of(loc))
    if found is None:
        return BadRequest(f"`{param_of(loc)}` is not valid.", param_of(loc))
    message = found.by_error.get(error["type"], found.message)
    return BadRequest(message, found.param or param_of(loc[:at]))


def _shape_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (`X` or `X | None`), to follow a path into it."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        for arg in typing.get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return None


def param_of(loc: tuple[Any, ...]) -> str:
    """A path as OpenAI's `param` writes it: `messages[2].content`."""
    text = ""
    for step in loc:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text


def unchecked(documented: Any) -> Any:
    """A field documented as `documented` (a shape: its component) but taken as it comes:
    the parser checks it, where what a value means depends on the rest of the request."""
    if isinstance(documented, type) and issubclass(documented, BaseModel):
        schema = {"$ref": REF.format(model=documented.__name__)}
    else:
        schema = TypeAdapter(documented).json_schema(ref_template=REF)
    return typing.Annotated[Any, WithJsonSchema(schema)]
