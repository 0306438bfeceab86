"""What every `/v1` wire shape is: a pydantic model whose JSON Schema is the OpenAPI
component of its name (agentplatform.v1.openapi), and which checks a request's body once
(`Shape.checked`) with the 400 a caller reads: the message and the `param` of the field at
fault, as OpenAI names them (`messages[2].content[0].text`).

A request's items are shapes too (a message, a content part, a tool), so a body is checked
item by item in that one pass; a union of item kinds is told apart by one field (`kinds`)
or by the JSON type of the value (`by_json_type`), so only the matching member is tried and
its error is the one answered.

Which 400: a `Refused` raised by a validator, else the deepest `Refusal` on the path of the
first error (a field without one falls back to its parent's; a refusal that says nothing
of this kind of error leaves it to the plain sentence), else a plain sentence made from the
kind of error (`_PLAIN`, naming the field). Never pydantic's own text. Strings are `Text`
(no NUL, no lone surrogate), JSON values the shapes do not look into `storable_json`.
Checks that span items or need the platform (a tool call answered, an image fetched,
totals) stay with the parser that turns the checked shape into what a run takes.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    Tag,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)
from pydantic.fields import FieldInfo
from typing_extensions import TypeAliasType


class BadRequest(ValueError):
    """A 400 for the caller, naming the field at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class Refused(ValueError):
    """Raised by a shape's validator: the 400's message, `at` a path below the value's own
    (`"json_schema.schema"`) when the fault is there."""

    def __init__(self, message: str, at: str | None = None) -> None:
        super().__init__(message)
        self.at = at


@dataclass(frozen=True, eq=False)  # (hashed as itself: typing hashes what annotates a union)
class Refusal:
    """A field's 400, for an error at it or below it (until a deeper refusal): `by_tag[<the
    caller's kind>]` for an item of a kind it does not take, else `by_error[<pydantic error
    type>]` where the kind of error says more (e.g. `too_long`), else `message` (None: the
    plain sentence, naming where the error is). `at`: a path below the field that the 400
    names (`role` for a message of no known role). A message may say `{param}`, `{tag}`
    (the kind the caller sent) and the error's limits (`{max_length}`, `{expected_tags}`)."""

    message: str | None = None
    at: str | None = None
    by_error: dict[str, str] = field(default_factory=dict)
    by_tag: dict[str, str] = field(default_factory=dict)


REF = "#/components/schemas/{model}"  # where a shape's component is in the OpenAPI
UNICODE = "Text must be valid Unicode."  # a lone surrogate ("\ud800" in JSON)
NUL = "Text may not contain NUL characters."
_SAID = 80  # at most this much of a caller's value is quoted back


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


# -- item types ------------------------------------------------------------------------------
def storable(text: str) -> str:
    """Text PostgreSQL and the model providers take: no NUL, no lone surrogate."""
    if "\x00" in text:
        raise Refused(NUL)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(UNICODE) from None
    return text


Text = Annotated[str, AfterValidator(storable)]  # a string that is stored or sent on
MAX_DEPTH = 64  # lists and objects within each other in a caller's JSON value


def storable_json(value: Any, depth: int = 0) -> Any:
    """A JSON value (a tool call's arguments, a schema) whose strings and keys are all
    storable, at most MAX_DEPTH levels deep. One walk over it."""
    if isinstance(value, str):
        storable(value)
    elif isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            raise Refused("The value nests too deeply.")
        for key in value if isinstance(value, dict) else ():
            storable(key)
        for item in value.values() if isinstance(value, dict) else value:
            storable_json(item, depth + 1)
    return value


def kinds(
    *members: type[BaseModel],
    by: str = "type",
    absent: str | None = None,
    refusal: Refusal | None = None,
) -> Any:
    """A union of shapes told apart by their `by` field (a `Literal` of the values each takes;
    `absent`: the value of an item without it). An item of no known kind is refused at the
    item (`refusal`, by default naming its `by` field); one of a known kind, by its shape.
    Told apart in pydantic's core (no Python call per item) unless there is one member or an
    `absent` kind."""
    refusal = refusal or Refusal(
        at=by,
        by_error={
            "union_tag_invalid": "`{param}` must be one of {expected_tags}.",
            "union_tag_not_found": "`{param}` is required.",
        },
    )
    not_found = refusal.by_error.get("union_tag_not_found")
    if not_found is not None:  # (what the core says of an item that is not an object)
        refusal = replace(
            refusal, by_error={"model_attributes_type": not_found, **refusal.by_error}
        )
    if len(members) > 1 and absent is None:
        union = typing.Union[members]  # noqa: UP007  (built from a list)
        return Annotated[union, Field(discriminator=by), refusal]
    tag_of: dict[str, str] = {}
    tagged = []
    for member in members:
        values = typing.get_args(member.model_fields[by].annotation)
        tag_of.update(dict.fromkeys(values, values[0]))
        tagged.append(Annotated[member, Tag(values[0])])

    def kind(value: Any) -> str | None:
        if isinstance(value, BaseModel):
            return tag_of.get(getattr(value, by, None))  # type: ignore[arg-type]
        if not isinstance(value, dict):
            return None
        said = value.get(by, absent)
        if not isinstance(said, str):
            return None if said is None else _quoted(said)
        return tag_of.get(said, said)

    kind.__name__ = by
    members_union = typing.Union[tuple(tagged)]  # noqa: UP007  (built from a list)
    return Annotated[members_union, Discriminator(kind), refusal]


_JSON_TYPES = ((str, "string"), (bool, "boolean"), (int, "number"), (float, "number"),
               (list, "array"), (dict, "object"), (BaseModel, "object"))  # fmt: skip


def json_type(value: Any) -> str | None:
    for python, name in _JSON_TYPES:
        if isinstance(value, python):
            return name
    return None


def by_json_type(**members: Any) -> Any:
    """A union of `string=`, `array=`, `object=` ... annotations, the one tried chosen by the
    value's JSON type (a value of another type: a `union_tag_invalid` error)."""
    tagged = [Annotated[annotation, Tag(name)] for name, annotation in members.items()]
    union = typing.Union[tuple(tagged)]  # noqa: UP007  (built from a list)
    return Annotated[union, Discriminator(json_type)]


# -- the 400 of an error -----------------------------------------------------------------------
_PLAIN = {
    "missing": "`{param}` is required.",
    "string_type": "`{param}` must be a string.",
    "int_type": "`{param}` must be an integer.",
    "float_type": "`{param}` must be a number.",
    "bool_type": "`{param}` must be a boolean.",
    "list_type": "`{param}` must be a list.",
    "dict_type": "`{param}` must be an object.",
    "model_type": "`{param}` must be an object.",
    "model_attributes_type": "`{param}` must be an object.",
    "literal_error": "`{param}` must be {expected}.",
    "string_too_short": "`{param}` must be at least {min_length} characters.",
    "string_too_long": "`{param}` must be at most {max_length} characters.",
    "too_short": "`{param}` must have at least {min_length} items.",
    "too_long": "`{param}` must have at most {max_length} items.",
    "string_pattern_mismatch": "`{param}` must match `{pattern}`.",
    "greater_than_equal": "`{param}` must be at least {ge}.",
    "less_than_equal": "`{param}` must be at most {le}.",
    "greater_than": "`{param}` must be more than {gt}.",
    "less_than": "`{param}` must be less than {lt}.",
    "union_tag_invalid": "`{param}` must be one of {expected_tags}.",
    "union_tag_not_found": "`{param}` is not of a known kind.",
}


def refusal(shape: type[BaseModel], error: Any) -> BadRequest:
    """The 400 for pydantic's first error of `shape` (see the module's docstring)."""
    loc, kind, ctx = error["loc"], error["type"], error.get("ctx") or {}
    wire: list[Any] = []  # `loc` as the caller names it: without the unions' tags
    found: Refusal | None = None
    found_at = 0  # how much of `wire` the refusal found covers
    node: Any = shape
    metadata: list[Any] = []
    for step in (*loc, None):
        node, metadata = _unwrapped(node, metadata)
        for item in metadata:
            if isinstance(item, Refusal):
                found, found_at = item, len(wire)
        if step is None:
            break
        if not _is_union(node) and any(isinstance(m, Discriminator) for m in metadata):
            metadata = []  # (a tagged union of one member: its tag is a step of the path)
            continue
        child = _child(node, metadata, step)
        if child is None:
            break  # (a plain union's member, a dict's key: the path ends here)
        node, metadata, named = child
        if named:
            wire.append(step)
    raised = ctx.get("error")
    if kind == "value_error" and isinstance(raised, Refused):
        return BadRequest(str(raised), _joined(param_of(tuple(wire)), raised.at))
    if kind == "string_unicode":  # (a constrained string's own check)
        return BadRequest(UNICODE, param_of(tuple(wire)))
    message = None
    if found is not None:
        tag = ctx.get("tag") if kind == "union_tag_invalid" else None
        message = found.by_tag.get(tag or "") or found.by_error.get(kind) or found.message
    if found is None or message is None:
        param = param_of(tuple(wire))
        return BadRequest(_said(_PLAIN.get(kind, "`{param}` is not valid."), param, ctx), param)
    param = _joined(param_of(tuple(wire[:found_at])), found.at)
    return BadRequest(_said(message, param, ctx), param)


def _unwrapped(node: Any, metadata: list[Any]) -> tuple[Any, list[Any]]:
    """`node` without `Annotated` (its metadata gathered), `| None`, a type alias and a
    root model's wrapping: what a step of the path goes into."""
    metadata = list(metadata)
    while True:
        if typing.get_origin(node) is Annotated:
            node, *extra = typing.get_args(node)
            metadata += extra
        elif _is_union(node) and len(members := _not_none(node)) == 1:
            node = members[0]
        elif isinstance(node, TypeAliasType):
            node = node.__value__
        elif isinstance(node, type) and issubclass(node, RootModel):
            info = node.model_fields["root"]
            node, metadata = info.annotation, metadata + _metadata(info)
        else:
            return node, metadata


def _child(node: Any, metadata: list[Any], step: Any) -> tuple[Any, list[Any], bool] | None:
    """Where `step` of an error's path goes from `node` (annotated with `metadata`): the
    annotation, its metadata, and whether the caller names the step (a field, an index; not
    a union's tag)."""
    if isinstance(node, type) and issubclass(node, BaseModel) and isinstance(step, str):
        info = _field(node, step)
        return None if info is None else (info.annotation, _metadata(info), True)
    if typing.get_origin(node) is list and isinstance(step, int):
        return typing.get_args(node)[0], [], True
    if _is_union(node) and isinstance(step, str):
        by = next((m.discriminator for m in metadata if getattr(m, "discriminator", None)), None)
        for member in _not_none(node):
            if any(isinstance(m, Tag) and m.tag == step for m in typing.get_args(member)[1:]):
                return member, [], False
            if isinstance(by, str) and step in _values(member, by):
                return member, [], False  # (told apart by a field: the step is its value)
    return None


def _metadata(info: FieldInfo) -> list[Any]:
    """A field's metadata, and the field itself when it names a discriminator (pydantic
    takes a union's `Field(discriminator=...)` into the field's own info)."""
    return [*info.metadata, info] if isinstance(info.discriminator, str) else list(info.metadata)


def _values(member: Any, by: str) -> tuple[Any, ...]:
    """The values of `member`'s `by` field, where it is a shape told apart by it."""
    if isinstance(member, type) and issubclass(member, BaseModel) and by in member.model_fields:
        return typing.get_args(member.model_fields[by].annotation)
    return ()


def _field(shape: type[BaseModel], name: str) -> FieldInfo | None:
    info = shape.model_fields.get(name)
    if info is not None and info.alias in (None, name):
        return info
    return next((i for i in shape.model_fields.values() if i.alias == name), None)


def _is_union(node: Any) -> bool:
    return isinstance(node, types.UnionType) or typing.get_origin(node) is typing.Union


def _not_none(union: Any) -> list[Any]:
    return [member for member in typing.get_args(union) if member is not type(None)]


def _quoted(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SAID else text[:_SAID] + "..."


def _said(message: str, param: str, ctx: dict[str, Any]) -> str:
    """`message` with `{param}` and the error's context (`{tag}`, `{max_length}`, ...)."""
    values = {"param": param, **ctx}
    for name, value in values.items():
        if name != "error":
            text = value if isinstance(value, str) else str(value)
            message = message.replace(f"{{{name}}}", text[:_SAID])
    return message


def _joined(param: str, at: str | None) -> str:
    return f"{param}.{at}" if param and at else param or at or ""


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
