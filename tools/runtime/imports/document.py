"""Reading an API description's text into plain JSON values, bounded for hostile input.

The text is JSON or YAML (YAML's safe loader: no Python objects). What it parses to is
copied once into plain JSON values (string keys, str/int/float/bool/None leaves) by one
walk that bounds the document's size, its nesting and the number of values it expands to:
YAML aliases share one object where a copy would repeat it (the "billion laughs"), so the
walk counts every visit, and a few kilobytes of aliases refuse instead of expanding.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

import yaml

from tools.runtime.imports import ImportRefused

# yaml.safe_load's loader, in C when built (the pure-Python one takes seconds for 2 MB).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_DOCUMENT_BYTES = 2_000_000
MAX_DOCUMENT_DEPTH = 64  # objects and lists within each other
MAX_DOCUMENT_VALUES = 500_000  # values visited, YAML aliases expanded (2 MB of spec: ~150k)


def load_document(document: str | bytes | dict) -> dict[str, Any]:
    """The document as plain JSON values; ImportRefused if it is too large, deep or
    expanding, or not a JSON/YAML object."""
    if isinstance(document, dict):
        return plain(document)
    if isinstance(document, bytes):
        if len(document) > MAX_DOCUMENT_BYTES:
            raise _too_large()
        try:
            document = document.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ImportRefused("The document is not UTF-8 text.") from None
    if not isinstance(document, str):
        raise ImportRefused("Give the document as JSON or YAML text.")
    if len(document.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
        raise _too_large()
    text = document.strip()
    if not text:
        raise ImportRefused("The document is empty.")
    try:
        # YAML is a superset of JSON; JSON's own parser is faster for it
        parsed = json.loads(text) if text[0] in "{[" else _yaml(text)
    except RecursionError:
        raise ImportRefused(
            f"The document nests deeper than {MAX_DOCUMENT_DEPTH} levels."
        ) from None
    except (ValueError, yaml.YAMLError) as exc:
        raise ImportRefused(f"The document is neither JSON nor YAML{_where(exc)}.") from None
    if not isinstance(parsed, dict):
        raise ImportRefused(
            "The document must be a JSON or YAML object (openapi: ..., paths: ...)."
        )
    return plain(parsed)


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 (a safe loader)


def plain(value: Any) -> dict[str, Any]:
    """A copy of `value` in plain JSON values (keys as strings: YAML reads `200:` as an
    int), refused past MAX_DOCUMENT_DEPTH or MAX_DOCUMENT_VALUES. Iterative: no recursion
    limit to hit."""
    _check_expansion(value)
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    visited = 0
    while stack:
        node, parent, key, depth = stack.pop()
        visited += 1
        if visited > MAX_DOCUMENT_VALUES:
            raise ImportRefused(
                f"The document expands to more than {MAX_DOCUMENT_VALUES:,} values "
                "(YAML aliases repeating each other?)."
            )
        if depth > MAX_DOCUMENT_DEPTH:
            raise ImportRefused(f"The document nests deeper than {MAX_DOCUMENT_DEPTH} levels.")
        if isinstance(node, dict):  # keys set now, in order; values as they are popped
            copy: Any = {}
            pending = [(_key(name), item) for name, item in node.items()]
            for name, _item in pending:
                copy[name] = None
            stack.extend((item, copy, name, depth + 1) for name, item in reversed(pending))
        elif isinstance(node, list | tuple):
            copy = [None] * len(node)
            stack.extend((node[i], copy, i, depth + 1) for i in reversed(range(len(node))))
        else:
            copy = _scalar(node)
        parent[key] = copy
    return root[0]


def _check_expansion(value: Any) -> None:
    """Refuse a value whose copy would hold more than MAX_DOCUMENT_VALUES values, or that
    contains itself (YAML: `&a [*a]`), measuring each shared object once: an alias bomb
    is refused in time linear in its text, not in what it expands to."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, dict | list | tuple):
            continue
        key = id(node)
        items = list(node.values()) if isinstance(node, dict) else node
        if children_done:
            open_.discard(key)
            size = 1 + sum(sizes.get(id(i), 1) if isinstance(i, dict | list | tuple) else 1
                           for i in items)  # fmt: skip
            if size > MAX_DOCUMENT_VALUES:
                raise ImportRefused(
                    f"The document expands to more than {MAX_DOCUMENT_VALUES:,} values "
                    "(YAML aliases repeating each other?)."
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in open_:
            raise ImportRefused("The document contains itself (a YAML alias inside its anchor).")
        open_.add(key)
        stack.append((node, True))
        stack.extend((item, False) for item in items if id(item) not in sizes)


def _key(name: Any) -> str:
    if isinstance(name, bool):
        return "true" if name else "false"
    if isinstance(name, str | int | float) or name is None:
        return str(name)
    raise ImportRefused("The document has an object key that is not text.")


def _scalar(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str | int | float | bool) or value is None:
        if isinstance(value, str) and "\x00" in value:
            raise ImportRefused("The document contains a NUL character.")
        return value
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()  # YAML reads `version: 2024-01-01` as a date
    if isinstance(value, bytes):  # YAML's !!binary
        raise ImportRefused("The document holds binary data, which an API description does not.")
    raise ImportRefused("The document holds a value that is not JSON.")


def _where(exc: Exception) -> str:
    """Where the parser stopped (line and column only: never its own message)."""
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f" (line {mark.line + 1}, column {mark.column + 1})"
    if isinstance(exc, json.JSONDecodeError):
        return f" (line {exc.lineno}, column {exc.colno})"
    return ""


def _too_large() -> ImportRefused:
    return ImportRefused(f"The document is larger than {MAX_DOCUMENT_BYTES // 1_000_000} MB.")
