"""An OpenAPI 3.0/3.1 or Swagger 2.0 document made into tool drafts, one per operation.

Each operation becomes an HTTP tool (tools/runtime/http_tool.py) the way an admin would
declare it: its name from `operationId` (else method and path), its description from the
summary and description, its input schema from the parameters and the JSON request body
(each argument mapped to the path, query, header or body), its output schema from the
success response when that is a JSON object, its URL from the document's server, and its
`auth` from the security scheme (an API key in a header, HTTP bearer or basic; OAuth 2,
OpenID Connect, keys in the query or a cookie are noted, not supported). The effect stays
derived from the method, so writes are confirmed by the tenant's rule like any tool's.

Operations HTTP tools cannot send (form or multipart bodies, a body that is not a JSON
object, HEAD/OPTIONS/TRACE) are listed as skipped, with why. A hostile document is refused
as a whole (ImportRefused): over 2 MB, nested past 64 levels, expanding past its bounds
(YAML aliases, `$ref`s repeating each other), references outside the document or leading
only to themselves, more than MAX_OPERATIONS operations (split the document, or import
the tags you need: we do not guess which 500 you meant).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import pydantic

from tools.runtime.http_tool import HEADER_NAME, HttpToolConfig
from tools.runtime.imports import ImportRefused, ToolDraft
from tools.runtime.imports.document import load_document
from tools.runtime.imports.refs import Resolver
from tools.runtime.reserved import reserved_reason

MAX_OPERATIONS = 500
MAX_DESCRIPTION_CHARS = 1_000
SENT_METHODS = ("get", "post", "put", "patch", "delete")
OTHER_METHODS = ("head", "options", "trace")
_ARGUMENT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # what model APIs take as property names
_PLACEHOLDER = re.compile(r"\{([^{}/]+)\}")
_RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "cookie",
                     "authorization", "content-type", "accept"}  # fmt: skip


@dataclass(frozen=True)
class ImportedOperation:
    operation_id: str  # "" when the document gives none
    draft: ToolDraft


@dataclass(frozen=True)
class SkippedOperation:
    source: str  # "POST /pet/{petId}"
    operation_id: str
    reason: str


@dataclass(frozen=True)
class OpenApiDrafts:
    title: str
    format: str  # "OpenAPI 3.1.0", "Swagger 2.0"
    base_url: str
    operations: tuple[ImportedOperation, ...]
    skipped: tuple[SkippedOperation, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


class _Skip(Exception):
    """An operation HTTP tools cannot send; the message says why."""


def openapi_drafts(
    document: str | bytes | dict,
    *,
    document_url: str | None = None,
    base_url: str | None = None,
) -> OpenApiDrafts:
    """The drafts of every operation of `document` (text or already parsed). Relative
    server URLs are resolved against `document_url` (where it was fetched); `base_url`
    replaces the document's servers. ImportRefused for a document we will not read."""
    doc = load_document(document)
    swagger = doc.get("swagger") == "2.0"
    version = doc.get("openapi")
    if not swagger and not (isinstance(version, str) and re.match(r"^3\.[01]\.", version)):
        raise ImportRefused(
            "This is not an OpenAPI 3.0/3.1 or Swagger 2.0 document (no `openapi: 3.x` "
            'or `swagger: "2.0"`).'
        )
    paths = doc.get("paths")
    if not isinstance(paths, dict) or not paths:
        raise ImportRefused("The document has no paths: nothing to call.", "paths")
    resolver = Resolver(doc, openapi_30=swagger or version.startswith("3.0"))
    items = _path_items(paths, resolver)
    count = sum(1 for _, item in items for method in item if method in SENT_METHODS + OTHER_METHODS)
    if count > MAX_OPERATIONS:
        raise ImportRefused(
            f"The document has {count:,} operations, more than {MAX_OPERATIONS}: split it "
            "into the parts you need and import those.",
            "paths",
        )
    reader = _Reader(doc, resolver, swagger=swagger, document_url=document_url, base_url=base_url)
    operations: list[ImportedOperation] = []
    skipped: list[SkippedOperation] = []
    for path, item in items:
        for method in (*SENT_METHODS, *OTHER_METHODS):
            operation = item.get(method)
            if not isinstance(operation, dict):
                continue
            source = f"{method.upper()} {path}"
            operation_id = operation.get("operationId")
            operation_id = operation_id if isinstance(operation_id, str) else ""
            try:
                if method in OTHER_METHODS:
                    raise _Skip(f"HTTP tools send {', '.join(m.upper() for m in SENT_METHODS)}")
                draft = reader.draft(path, item, method, operation)
            except _Skip as exc:
                skipped.append(SkippedOperation(source, operation_id, str(exc)))
                continue
            except (TypeError, ValueError, AttributeError, KeyError, IndexError):
                # A value of a type the document's own format rules out (`required: [[1]]`,
                # `parameters: 5`): hostile or broken, the operation is left out, never a 500.
                reason = "its description holds a value of the wrong type for OpenAPI"
                skipped.append(SkippedOperation(source, operation_id, reason))
                continue
            operations.append(ImportedOperation(operation_id, draft))
    info = doc.get("info") if isinstance(doc.get("info"), dict) else {}
    title = info.get("title") if isinstance(info.get("title"), str) else ""
    return OpenApiDrafts(
        title=title[:200],
        format=f"Swagger {doc['swagger']}" if swagger else f"OpenAPI {version}",
        base_url=reader.document_base or "",
        operations=tuple(operations),
        skipped=tuple(skipped),
        notes=tuple(sorted(resolver.notes)),
    )


def _path_items(paths: dict[str, Any], resolver: Resolver) -> list[tuple[str, dict[str, Any]]]:
    items = []
    for path, item in paths.items():
        if not path.startswith("/"):
            continue  # `x-` extensions
        item = resolver.follow(item, f"paths.{path}")
        if isinstance(item, dict):
            items.append((path, item))
    return items


@dataclass
class _Argument:
    name: str  # as the model sees it
    location: str  # path, query, header, body
    sent_as: str  # as the API names it (the URL placeholder, for a path parameter)
    schema: dict[str, Any]
    required: bool


class _Reader:
    def __init__(
        self,
        doc: dict[str, Any],
        resolver: Resolver,
        *,
        swagger: bool,
        document_url: str | None,
        base_url: str | None,
    ) -> None:
        self.doc = doc
        self.resolver = resolver
        self.swagger = swagger
        self.document_url = document_url
        self.base_url = base_url
        self.names: set[str] = set()
        self.body_notes: list[str] = []
        components = doc.get("components") if isinstance(doc.get("components"), dict) else {}
        schemes = doc.get("securityDefinitions") if swagger else components.get("securitySchemes")
        self.schemes = schemes if isinstance(schemes, dict) else {}
        self.document_base = self._base(doc.get("servers"), "servers")

    # -- the whole operation ------------------------------------------------------------
    def draft(
        self, path: str, item: dict[str, Any], method: str, operation: dict[str, Any]
    ) -> ToolDraft:
        where = f"paths.{path}.{method}"
        base = self.document_base
        if not self.swagger and not self.base_url:
            for servers in (operation.get("servers"), item.get("servers")):
                if isinstance(servers, list) and servers:
                    base = self._base(servers, f"{where}.servers")
                    break
        if not base:
            raise ImportRefused(
                "The document gives no absolute server URL (or a relative one, and it was "
                "not fetched from a URL): give the API's base URL.",
                "servers",
            )
        if "?" in path or "#" in path:
            raise _Skip("its path holds a query or fragment, which a tool's URL mapping does not")
        notes: list[str] = []
        auth, auth_note = self._auth(operation, where)
        if auth_note:
            notes.append(auth_note)
        arguments = self._parameters(item, operation, where, auth, notes)
        arguments += self._body(operation, where, method, {a.name for a in arguments}, notes)
        url_path = _PLACEHOLDER.sub(
            lambda m: "{" + _placeholder_for(m.group(1), arguments) + "}", path
        )
        config: dict[str, Any] = {
            "method": method.upper(),
            "url": base.rstrip("/") + url_path,
            "arguments": [_target(a) for a in arguments],
        }
        if auth is not None:
            config["auth"] = auth
        input_schema: dict[str, Any] = {
            "type": "object",
            "properties": {a.name: a.schema for a in arguments},
        }
        if required := [a.name for a in arguments if a.required]:
            input_schema["required"] = required
        try:
            HttpToolConfig.model_validate(config).check_against_schema(input_schema)
        except (pydantic.ValidationError, ValueError) as exc:
            raise _Skip(f"its request cannot be mapped: {_first_problem(exc)}") from None
        output_schema = self._output(operation, where, notes)
        return ToolDraft(
            name=self._name(operation, method, path),
            description=_description(operation, method, path),
            input_schema=input_schema,
            config=config,
            output_schema=output_schema,
            source=f"{method.upper()} {path}",
            notes=tuple(notes),
        )

    def _name(self, operation: dict[str, Any], method: str, path: str) -> str:
        wanted = operation.get("operationId")
        if not isinstance(wanted, str) or not wanted.strip():
            wanted = f"{method}_{path}"
        # ("__" collapsed: it is the shape of an MCP connection's tool names)
        name = re.sub(r"[^A-Za-z0-9-]+", "_", wanted).strip("_-")[:64] or method
        if reserved_reason(name) is not None:
            name = f"api_{name}"[:64]
        unique, number = name, 1
        while unique in self.names:
            number += 1
            unique = f"{name[: 64 - len(str(number)) - 1]}_{number}"
        self.names.add(unique)
        return unique

    # -- where it is sent ---------------------------------------------------------------
    def _base(self, servers: Any, where: str) -> str | None:
        if self.base_url:
            return _absolute(self.base_url, None)
        if self.swagger:
            host = self.doc.get("host")
            base_path = (
                self.doc.get("basePath") if isinstance(self.doc.get("basePath"), str) else ""
            )
            schemes = self.doc.get("schemes") if isinstance(self.doc.get("schemes"), list) else []
            if not isinstance(host, str) or not host:
                return _absolute(base_path or "/", self.document_url)
            scheme = "https" if "https" in schemes or not schemes else str(schemes[0])
            return _absolute(f"{scheme}://{host}{base_path}", None)
        if not isinstance(servers, list) or not servers:
            return _absolute("/", self.document_url)  # 3.x: no servers means "/"
        server = self.resolver.follow(servers[0], where)
        url = server.get("url") if isinstance(server, dict) else None
        if not isinstance(url, str):
            return None
        variables = server.get("variables") if isinstance(server.get("variables"), dict) else {}
        for name, variable in variables.items():
            default = variable.get("default") if isinstance(variable, dict) else None
            if isinstance(default, str | int):
                url = url.replace("{" + name + "}", str(default))
        return _absolute(url, self.document_url)

    def _auth(self, operation: dict[str, Any], where: str) -> tuple[dict | None, str]:
        """The first alternative of the operation's security this tool can send, and a note
        when none is (the tool is then made without `auth`)."""
        security = operation.get("security", self.doc.get("security"))
        if isinstance(security, dict):  # seen in published documents: one object, not a list
            security = [{name: scopes} for name, scopes in security.items()]
        if not isinstance(security, list) or not security:
            return None, ""
        unsupported: list[str] = []
        for requirement in security:
            if not isinstance(requirement, dict):
                continue
            if not requirement:
                return None, ""  # `{}`: calling without credentials is allowed
            if len(requirement) > 1:
                unsupported.append(" and ".join(sorted(requirement)) + " together")
                continue
            [name] = requirement
            scheme = self.resolver.follow(self.schemes.get(name), f"{where}.security")
            auth, why = _scheme_auth(scheme)
            if auth is not None:
                note = ""
                if auth["type"] == "basic":
                    note = "basic authentication: give the username when importing"
                return auth, note
            unsupported.append(f"{name!r} ({why})")
        if not unsupported:
            return None, ""
        return None, (
            f"needs {' or '.join(unsupported)}, which imported tools do not send: "
            "add the credential to the tool yourself"
        )

    # -- the model's arguments ------------------------------------------------------------
    def _parameters(
        self,
        item: dict[str, Any],
        operation: dict[str, Any],
        where: str,
        auth: dict | None,
        notes: list[str],
    ) -> list[_Argument]:
        declared: dict[tuple[str, str], dict[str, Any]] = {}
        for level, source in (("", item), (f"{where}.", operation)):
            parameters = source.get("parameters")
            for index, parameter in enumerate(parameters if isinstance(parameters, list) else []):
                here = f"{level or where + '.'}parameters[{index}]"
                parameter = self.resolver.follow(parameter, here)
                if not isinstance(parameter, dict) or not isinstance(parameter.get("name"), str):
                    raise ImportRefused("A parameter has no name.", here)
                declared[(str(parameter.get("in", "")), parameter["name"])] = parameter
        if any(place == "formData" for place, _ in declared):
            raise _Skip("it sends form data; HTTP tools send JSON")
        credential = (auth or {}).get("header", "Authorization").lower() if auth else None
        arguments: list[_Argument] = []
        taken: set[str] = set()
        for (place, name), parameter in declared.items():
            if place == "body":
                continue  # Swagger 2.0's body: see _body
            if place == "cookie":
                notes.append(f"cookie parameter {name!r} skipped: HTTP tools send no cookies")
                continue
            if place == "header" and (
                name.lower() in _RESERVED_HEADERS or name.lower() == credential
            ):
                if parameter.get("required") and name.lower() != credential:
                    raise _Skip(f"it needs the header {name!r}, which a tool cannot set")
                notes.append(f"header {name!r} skipped: the tool sets it itself")
                continue
            if place == "header" and not HEADER_NAME.match(name):
                notes.append(f"header {name[:100]!r} skipped: not a valid header name")
                continue
            if place not in ("path", "query", "header"):
                raise ImportRefused(f"Unknown parameter location {place!r}.", where)
            schema = self.resolver.parameter_schema(parameter, where)
            argument = _unique(_argument_name(name, place), place, taken)
            required = place == "path" or parameter.get("required") is True
            arguments.append(_Argument(argument, place, name, schema, required))
        return arguments

    def _body(
        self,
        operation: dict[str, Any],
        where: str,
        method: str,
        names: set[str],
        notes: list[str],
    ) -> list[_Argument]:
        self.body_notes = notes
        schema, required = self._body_schema(operation, where)
        if schema is None:
            return []
        if method == "get":
            notes.append("its request body is skipped: a GET sends none")
            return []
        properties, needed = _object_parts(schema)
        if properties is None:
            raise _Skip(
                "its request body is not a JSON object (a list or a single value), which "
                "HTTP tools cannot send"
            )
        arguments = []
        taken = set(names)
        for name, property_schema in properties.items():
            if isinstance(property_schema, dict) and property_schema.get("readOnly") is True:
                continue  # the server sets it
            argument = _unique(_argument_name(name, "body"), "body", taken)
            schema_of = property_schema if isinstance(property_schema, dict) else {}
            arguments.append(
                _Argument(argument, "body", name, schema_of, required and name in needed)
            )
        return arguments

    def _body_schema(self, operation: dict[str, Any], where: str) -> tuple[dict | None, bool]:
        if self.swagger:
            parameters = operation.get("parameters")
            for parameter in parameters if isinstance(parameters, list) else []:
                parameter = self.resolver.follow(parameter, where)
                if isinstance(parameter, dict) and parameter.get("in") == "body":
                    schema = self.resolver.schema(parameter.get("schema", {}), f"{where}.body")
                    return schema, parameter.get("required") is True
            return None, False
        body = self.resolver.follow(operation.get("requestBody"), f"{where}.requestBody")
        if not isinstance(body, dict):
            return None, False
        content = body.get("content") if isinstance(body.get("content"), dict) else {}
        media = _json_media(content)
        if media is None:
            kinds = ", ".join(sorted(content))[:100]
            if content and body.get("required") is True:
                raise _Skip(f"its request body is {kinds}; HTTP tools send JSON")
            if content:
                self.body_notes.append(f"its optional request body ({kinds}) is skipped")
            return None, False
        schema = self.resolver.schema(media.get("schema", {}), f"{where}.requestBody")
        return schema, body.get("required") is True

    def _output(self, operation: dict[str, Any], where: str, notes: list[str]) -> dict | None:
        responses = operation.get("responses")
        if not isinstance(responses, dict):
            return None
        codes = sorted(code for code in responses if re.match(r"^2(\d\d|XX)$", code))
        for code in codes:
            response = self.resolver.follow(responses[code], f"{where}.responses.{code}")
            if not isinstance(response, dict):
                continue
            if self.swagger:
                raw = response.get("schema")
            else:
                content = (
                    response.get("content") if isinstance(response.get("content"), dict) else {}
                )
                media = _json_media(content)
                raw = media.get("schema") if media is not None else None
            if raw is None:
                continue
            schema = self.resolver.schema(raw, f"{where}.responses.{code}")
            if _object_parts(schema)[0] is not None:
                return {**schema, "type": "object"}
            kind = schema.get("type") or "value"
            notes.append(
                f"it answers a JSON {kind}, not an object: no output schema (tool output "
                "schemas describe objects)"
            )
            return None
        return None


# -- small pieces ------------------------------------------------------------------------
def _scheme_auth(scheme: Any) -> tuple[dict | None, str]:
    if not isinstance(scheme, dict):
        return None, "not defined in the document"
    kind = scheme.get("type")
    if kind == "apiKey":
        place, name = scheme.get("in"), scheme.get("name")
        if place == "header" and isinstance(name, str) and name:
            return {"type": "header", "header": name}, ""
        return None, f"an API key in the {place}"
    if kind == "basic":  # Swagger 2.0
        return {"type": "basic"}, ""
    if kind == "http":
        how = str(scheme.get("scheme", "")).lower()
        if how == "bearer":
            return {"type": "bearer"}, ""
        if how == "basic":
            return {"type": "basic"}, ""
        return None, f"HTTP {how} authentication"
    return None, {"oauth2": "OAuth 2", "openIdConnect": "OpenID Connect"}.get(str(kind), str(kind))


def _json_media(content: dict[str, Any]) -> dict[str, Any] | None:
    for media_type, media in content.items():
        kind = media_type.split(";")[0].strip().lower()
        if kind == "application/json" or kind.endswith("+json") or kind == "*/*":
            return media if isinstance(media, dict) else {}
    return None


def _object_parts(schema: dict[str, Any]) -> tuple[dict[str, Any] | None, set[str]]:
    """The properties and required names of an object schema (allOf's parts merged);
    None when it is not an object."""
    if "allOf" in schema and isinstance(schema["allOf"], list):
        properties: dict[str, Any] = {}
        required: set[str] = set()
        for part in schema["allOf"]:
            own, needed = _object_parts(part) if isinstance(part, dict) else (None, set())
            if own is None:
                return None, set()
            properties.update(own)
            required |= needed
        own, needed = _object_parts({k: v for k, v in schema.items() if k != "allOf"})
        return {**properties, **(own or {})}, required | needed
    kind = schema.get("type")
    if kind not in (None, "object") or not isinstance(schema.get("properties", {}), dict):
        return None, set()
    if kind is None and "properties" not in schema:
        return None, set()
    needed = schema.get("required")
    needed = needed if isinstance(needed, list) else []
    return dict(schema.get("properties", {})), {name for name in needed if isinstance(name, str)}


def _argument_name(name: str, place: str) -> str:
    if place == "path":  # the URL placeholder too: an identifier
        ident = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "value"
        return f"_{ident}" if ident[0].isdigit() else ident[:64]
    if _ARGUMENT.match(name):
        return name
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:64] or "value"


def _unique(name: str, place: str, taken: set[str]) -> str:
    """`name`, or `<place>_<name>` (then numbered) when another location took it."""
    unique = name
    if unique in taken:
        unique = f"{place}_{name}"[:64]
    number = 1
    while unique in taken:
        number += 1
        unique = f"{place}_{name}"[:60] + f"_{number}"
    taken.add(unique)
    return unique


def _placeholder_for(name: str, arguments: list[_Argument]) -> str:
    for argument in arguments:
        if argument.location == "path" and argument.sent_as == name:
            return argument.name
    raise _Skip(f"its path parameter {{{name}}} is not declared")


def _target(argument: _Argument) -> dict[str, Any]:
    target = {"argument": argument.name, "to": argument.location}
    if argument.location != "path" and argument.sent_as != argument.name:
        target["name"] = argument.sent_as
    return target


def _description(operation: dict[str, Any], method: str, path: str) -> str:
    parts = [
        text.strip()
        for text in (operation.get("summary"), operation.get("description"))
        if isinstance(text, str) and text.strip()
    ]
    if len(parts) == 2 and parts[1].startswith(parts[0]):
        parts = parts[1:]
    text = "\n\n".join(parts) or f"{method.upper()} {path}"
    if operation.get("deprecated") is True:
        text = f"(Deprecated) {text}"
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[: MAX_DESCRIPTION_CHARS - 1] + "…"
    return text


def _absolute(url: str, against: str | None) -> str | None:
    try:
        if against:
            url = urljoin(against, url)
        parts = urlsplit(url)
        parts.hostname  # noqa: B018  (raises on a malformed IPv6 host such as "[x")
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return url.split("?", 1)[0].split("#", 1)[0]


def _first_problem(exc: Exception) -> str:
    if isinstance(exc, pydantic.ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")[:200]
        return f"{where}: {message}" if where else message
    return str(exc)[:300]
