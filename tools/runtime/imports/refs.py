"""An OpenAPI document's `$ref`s followed within the document, and its schemas made into
the JSON Schema (2020-12) tool schemas are.

Only local references (`#/components/schemas/Pet`) are followed: a reference to another
file or URL is refused, as tool schemas' are (tools/runtime/validation.py). Schemas are
inlined, so a tool's schema stands alone: a schema that contains itself (a tree's
`children: [Tree]`) is cut where it recurs (left open, `{}`, with a note), a reference
that only leads to itself is refused, and the copies every inlining makes count against
one budget per document, so references repeating each other (a few levels of ten
references each) refuse instead of expanding.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from tools.runtime.imports import ImportRefused
from tools.runtime.validation import MAX_SCHEMA_DEPTH  # as tool schemas

MAX_INLINED_VALUES = 200_000  # values copied while inlining, for the whole document

# OpenAPI's own schema keywords, not JSON Schema's: dropped from tool schemas.
_OPENAPI_ONLY = frozenset({"discriminator", "xml", "externalDocs", "example", "nullable"})
_VALUES = frozenset({"enum", "const", "default", "examples", "required"})
_SWAGGER_PARAMETER_KEYS = frozenset(
    {"type", "format", "items", "enum", "default", "minimum", "maximum", "exclusiveMinimum",
     "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
     "uniqueItems", "multipleOf", "description"}
)  # fmt: skip


class Resolver:
    """Follows and inlines one document's references; one per document (its budget)."""

    def __init__(self, document: dict[str, Any], *, openapi_30: bool) -> None:
        self.document = document
        self.openapi_30 = openapi_30  # 3.0/2.0 schemas: `nullable`, boolean exclusive bounds
        self.copied = 0
        self.notes: set[str] = set()
        self.cuts = 0
        self.inlined: dict[str, tuple[Any, int]] = {}  # $ref -> (its schema, values copied)

    def target(self, ref: Any, path: str) -> Any:
        """What a reference points at (not inlined)."""
        if not isinstance(ref, str):
            raise ImportRefused("$ref must be text.", path)
        if not ref.startswith("#"):
            raise ImportRefused(
                f"$ref {_shown(ref)} points outside the document; only references within "
                "it (#/...) are followed. Bundle the document first.",
                path,
            )
        node: Any = self.document
        pointer = ref[1:]
        if pointer and not pointer.startswith("/"):
            raise ImportRefused(f"$ref {_shown(ref)} is not a JSON pointer (#/...).", path)
        for token in pointer.split("/")[1:] if pointer else []:
            token = unquote(token).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise ImportRefused(f"$ref {_shown(ref)} points at nothing in the document.", path)
        return node

    def follow(self, node: Any, path: str) -> Any:
        """`node`, or what its chain of `$ref`s leads to (a Parameter, a Request Body)."""
        seen: set[str] = set()
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if ref in seen:
                raise ImportRefused(f"$ref {_shown(str(ref))} only leads to itself.", path)
            seen.add(ref)
            node = self.target(ref, path)
        return node

    def schema(self, node: Any, path: str) -> dict[str, Any]:
        """`node` as a standalone JSON Schema: references inlined, OpenAPI's keywords
        turned into JSON Schema's. ImportRefused past the budget or the depth."""
        result = self._schema(node, path, (), 0)
        return result if isinstance(result, dict) else {}

    def _schema(self, node: Any, path: str, refs: tuple[str, ...], depth: int) -> Any:
        self.copied += 1
        if self.copied > MAX_INLINED_VALUES:
            raise ImportRefused(
                f"The document's schemas expand to more than {MAX_INLINED_VALUES:,} values "
                "once their $refs are followed (references repeating each other?).",
                path,
            )
        if depth > MAX_SCHEMA_DEPTH:
            raise ImportRefused(f"A schema nests deeper than {MAX_SCHEMA_DEPTH} levels.", path)
        if isinstance(node, list):
            return [self._schema(item, path, refs, depth + 1) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            ref = node["$ref"]
            if ref in refs:
                name = str(ref).rsplit("/", 1)[-1]
                self.notes.add(f"the schema {name!r} contains itself: cut where it recurs")
                self.cuts += 1
                return {"description": f"A {name} (recursive: not expanded)."}
            target = self._inlined(ref, path, refs, depth)
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            if siblings and isinstance(target, dict):  # 3.1: a $ref's siblings apply too
                own = self._schema(siblings, path, refs, depth)
                return {**target, **own}
            return target
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _OPENAPI_ONLY or key.startswith("x-"):
                continue
            if key in _VALUES:
                out[key] = value  # values, not schemas (plain JSON already)
                continue
            if key in ("properties", "patternProperties", "$defs", "definitions"):
                if isinstance(value, dict):
                    out[key] = {
                        name: self._schema(item, path, refs, depth + 1)
                        for name, item in value.items()
                    }
                continue
            out[key] = self._schema(value, path, refs, depth + 1)
        if self.openapi_30:
            _openapi_30(node, out)
        if out.get("type") == "file":  # Swagger 2.0's upload
            out["type"] = "string"
        return out

    def _inlined(self, ref: str, path: str, refs: tuple[str, ...], depth: int) -> Any:
        """The target of `ref` inlined. Inlined once per document and shared where it did
        not recur (its copies counted all the same): references repeating each other reach
        the budget in a few steps."""
        known = self.inlined.get(ref)
        if known is not None:
            self.copied += known[1]
            if self.copied > MAX_INLINED_VALUES:
                self._schema(None, path, refs, depth)  # (refuses)
            return known[0]
        copied, cuts = self.copied, self.cuts
        target = self._schema(self.follow({"$ref": ref}, path), path, (*refs, ref), depth)
        if self.cuts == cuts:  # (a result without cuts is the same on any path)
            self.inlined[ref] = (target, self.copied - copied)
        return target

    def parameter_schema(self, parameter: dict[str, Any], path: str) -> dict[str, Any]:
        """A parameter's schema: 3.x's `schema` (or its `content`'s), 2.0's own keys."""
        if "schema" in parameter:
            schema = self.schema(parameter["schema"], path)
        elif isinstance(parameter.get("content"), dict) and parameter["content"]:
            media = next(iter(parameter["content"].values()))
            schema = self.schema(media.get("schema", {}) if isinstance(media, dict) else {}, path)
        else:
            schema = self.schema(
                {k: v for k, v in parameter.items() if k in _SWAGGER_PARAMETER_KEYS}, path
            )
        description = parameter.get("description")
        if isinstance(description, str) and description.strip() and "description" not in schema:
            schema = {**schema, "description": description.strip()[:500]}
        return schema


def _openapi_30(node: dict[str, Any], out: dict[str, Any]) -> None:
    """OpenAPI 3.0's (and Swagger 2.0's) schema dialect into JSON Schema 2020-12's."""
    if node.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        # draft 4: a flag on minimum/maximum, where 2020-12 has the bound itself
        if isinstance(out.get(bound), bool) and out.pop(bound) and limit in out:
            out[bound] = out.pop(limit)


def _shown(ref: str) -> str:
    return repr(ref if len(ref) <= 80 else ref[:79] + "…")
