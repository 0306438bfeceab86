"""One HTTP tool from a pasted `curl` command (issue #40): its method, URL, headers, query and
JSON body, with the values the caller marks turned into typed arguments and the rest fixed.

The command is read, never run: it is split as a POSIX shell would (`shlex`, line
continuations joined) and only the options that describe one request are understood. An
option that would change what is sent in a way a tool cannot repeat — a config file (`-K`),
several requests (`--next`), files (`@file`, `-T`, `-F`), a proxy, another scheme — or any
shell operator is refused; an option that only changes how curl prints or waits is left out
with a note. A credential — `-u`, `--oauth2-bearer`, an `Authorization` header, or a header,
query parameter or body field named as one (`credential_name`: "X-RapidAPI-Key", "appid") —
is never in the draft: the first sent in a header becomes the tool's `auth`, its value
returned apart as `CurlImport.secret`; any other is left out with a note (an HTTP tool
holds one secret and sends it in a header only).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import pydantic

from tools.runtime.credential_leaks import credential_like
from tools.runtime.http_tool import HEADER_NAME, PLACEHOLDER, HttpToolConfig
from tools.runtime.imports import ImportRefused, ToolDraft

MAX_COMMAND_CHARS = 20_000
MAX_TOKENS = 500
MAX_HEADERS = 50
MAX_HEADER_CHARS = 8_000
MAX_BODY_CHARS = 100_000
MAX_MARKS = 100
MAX_BODY_DEPTH = 32
TYPES = ("string", "integer", "number", "boolean", "array", "object")
_ARGUMENT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SHELL_OPERATORS = set(";&|<>()")
# An environment variable or a documentation placeholder standing for the credential.
_STAND_IN = re.compile(r"^(\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^<>]*>|\{\{[^{}]*\}\})$")
# Beyond the names every face refuses in clear configuration (`credential_like`: key,
# token, secret, auth, password, signature ... as words), an import keeps out these words of
# a name (split on -, _, . and changes of case): OpenWeather's `appid`, a session id, and
# the compounds written as one word. (A draft must save: it keeps nothing credential_like.)
_MORE_CREDENTIAL_WORDS = frozenset(
    {
        "appid", "session", "sessionid", "jwt", "pass", "passphrase", "apitoken",
        "accesstoken", "authtoken", "credential", "credentials",
    }
)  # fmt: skip
_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_DROPPED_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}

# Options that take a value and only change how curl itself behaves: left out, noted.
_QUIET_WITH_VALUE = {
    "-o", "--output", "-w", "--write-out", "--connect-timeout", "--retry", "--retry-delay",
    "--retry-max-time", "-c", "--cookie-jar", "-D", "--dump-header", "--limit-rate",
    "--max-redirs", "--trace", "--trace-ascii", "--stderr", "-Y", "--speed-limit",
    "-y", "--speed-time",
}  # fmt: skip
# Options without a value that only change how curl prints, follows or checks.
_QUIET_FLAGS = {
    "-s", "--silent", "-S", "--show-error", "-i", "--include", "-v", "--verbose",
    "-L", "--location", "--compressed", "-f", "--fail", "--fail-with-body", "-N",
    "--no-buffer", "-k", "--insecure", "-#", "--progress-bar", "--http1.1", "--http2",
    "--globoff", "-g", "-q", "--disable", "--no-progress-meter", "--location-trusted",
    "-O", "--remote-name", "-J", "--remote-header-name", "--raw", "--tr-encoding",
}  # fmt: skip
# Options that change what is sent in a way a tool cannot repeat: refused, saying why.
_REFUSED = {
    "-K": "a config file (-K) is read by curl, not here",
    "--config": "a config file (--config) is read by curl, not here",
    "-:": "several requests (--next) make several tools: paste one at a time",
    "--next": "several requests (--next) make several tools: paste one at a time",
    "-F": "a multipart form (-F) cannot be sent by an HTTP tool, which sends JSON",
    "--form": "a multipart form (--form) cannot be sent by an HTTP tool, which sends JSON",
    "--form-string": "a multipart form cannot be sent by an HTTP tool, which sends JSON",
    "-T": "uploading a file (-T) is not something a tool can repeat",
    "--upload-file": "uploading a file is not something a tool can repeat",
    "-x": "a proxy (-x) is the platform's choice, not a tool's",
    "--proxy": "a proxy is the platform's choice, not a tool's",
    "--socks5": "a proxy is the platform's choice, not a tool's",
    "--unix-socket": "a Unix socket is not an address a tool may call",
    "--abstract-unix-socket": "a Unix socket is not an address a tool may call",
    "--resolve": "--resolve would change which address is called; the platform resolves",
    "--connect-to": "--connect-to would change which address is called; the platform resolves",
    "-I": "a HEAD request (-I) is not one an HTTP tool sends",
    "--head": "a HEAD request is not one an HTTP tool sends",
    "--request-target": "--request-target is not something a tool can send",
    "-E": "client certificates (-E) are not supported by HTTP tools",
    "--cert": "client certificates are not supported by HTTP tools",
    "--key": "client certificates are not supported by HTTP tools",
    "--aws-sigv4": "request signing (--aws-sigv4) is not supported by HTTP tools",
    "--digest": "digest authentication is not supported by HTTP tools",
    "--ntlm": "NTLM authentication is not supported by HTTP tools",
    "--negotiate": "Negotiate authentication is not supported by HTTP tools",
    "--url-query": "--url-query is not supported here: put the parameters in the URL",
}
_VALUE_OPTIONS = {
    "-X", "--request", "-H", "--header", "-d", "--data", "--data-raw", "--data-binary",
    "--data-ascii", "--data-urlencode", "--json", "-u", "--user", "--url", "-A",
    "--user-agent", "-e", "--referer", "-b", "--cookie", "-m", "--max-time",
    "--oauth2-bearer",
}  # fmt: skip
_SHORT_WITH_VALUE = {o for o in _VALUE_OPTIONS | _QUIET_WITH_VALUE | set(_REFUSED) if len(o) == 2}


@dataclass(frozen=True)
class CurlImport:
    """The draft a command makes; `secret`: the credential it carried (store it as the
    tool's secret, never show it), None when it had none or only a stand-in (`$TOKEN`);
    `places`: every value that can be marked as an argument, `(mark key, value)` in the
    command's order ("path.42", "query.city", "header.X-Region", "body.model")."""

    draft: ToolDraft
    secret: str | None = None
    places: tuple[tuple[str, Any], ...] = ()


@dataclass
class _Request:
    method: str | None = None
    url: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    data: list[tuple[str, str]] = field(default_factory=list)  # (option, text)
    get: bool = False
    user: str | None = None
    bearer: str | None = None
    timeout_s: float | None = None
    notes: list[str] = field(default_factory=list)


def parse_curl(
    command: str,
    *,
    marks: Mapping[str, Any] | None = None,
    name: str | None = None,
    description: str | None = None,
) -> CurlImport:
    """The tool `command` describes. `marks`: `{place: {"name", "type", "description",
    "required"}}` for each value that becomes an argument (places as in `CurlImport.places`;
    `type` inferred from the value when not given); every other value stays fixed.
    ImportRefused (our message) for anything we will not turn into a tool."""
    request = _read_options(_tokens(command))
    method, url, query, path_segments = _target(request)
    headers, auth, secret = _headers_and_auth(request)
    body, query = _body(request, method, headers, query)
    fixed_query = _fixed_query(query, request.notes)
    places = _places(path_segments, fixed_query, headers, body)
    arguments, properties, required, url = _apply_marks(
        marks or {}, places, url, fixed_query, headers, body
    )
    config: dict[str, Any] = {"method": method, "url": url}
    if arguments:
        config["arguments"] = arguments
    fixed = {
        k: v for k, v in (("query", fixed_query), ("headers", dict(headers)), ("body", body)) if v
    }
    if fixed:
        config["fixed"] = fixed
    if auth is not None:
        config["auth"] = auth
    if request.timeout_s is not None:
        config["timeout_s"] = request.timeout_s
    _check_config(config)
    input_schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        input_schema["required"] = required
    parts = urlsplit(url)
    draft = ToolDraft(
        name=name or _tool_name(method, parts.path),
        description=description or f"Calls {method} {parts.netloc}{parts.path}.",
        input_schema=input_schema,
        config=config,
        source="curl",
        notes=tuple(request.notes),
    )
    return CurlImport(draft=draft, secret=secret, places=tuple(places.items()))


# -- reading the command -----------------------------------------------------------------


def _tokens(command: Any) -> list[str]:
    if not isinstance(command, str) or not command.strip():
        raise ImportRefused("Paste a curl command.")
    if len(command) > MAX_COMMAND_CHARS:
        raise ImportRefused(f"The command is over {MAX_COMMAND_CHARS:,} characters.")
    text = re.sub(r"\\\r?\n", " ", command)  # line continuations
    text = text.replace("\r\n", "\n").strip()
    if _newline_outside_quotes(text):
        raise ImportRefused(
            "The command spans several lines without a backslash at their ends: paste one "
            "curl command."
        )
    if _CONTROL.search(text):
        raise ImportRefused("The command holds control characters.")
    if "`" in text:
        raise ImportRefused("Command substitution (`...`) is a shell's, not part of a request.")
    lexer = shlex.shlex(text, posix=True, punctuation_chars="".join(_SHELL_OPERATORS))
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        raise ImportRefused("The command has a quote that is never closed.") from None
    if len(tokens) > MAX_TOKENS:
        raise ImportRefused(f"The command has over {MAX_TOKENS} words.")
    if tokens and tokens[0] == "$":  # a prompt copied with it
        tokens = tokens[1:]
    if any(token and set(token) <= _SHELL_OPERATORS for token in tokens):
        raise ImportRefused(
            "Shell operators (;, &&, |, >, $(...)) are not part of a request: paste one curl "
            "command (quote a URL that holds &)."
        )
    if not tokens or tokens[0].rsplit("/", 1)[-1] not in ("curl", "curl.exe"):
        raise ImportRefused("The command must start with curl.")
    return tokens[1:]


def _newline_outside_quotes(text: str) -> bool:
    """A line break outside quotes ends a shell command (a second one would follow)."""
    quote, escaped = "", False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "\n":
            return True
    return False


def _read_options(tokens: list[str]) -> _Request:
    request = _Request()
    queue = list(tokens)
    while queue:
        word = queue.pop(0)
        if word == "--":
            for rest in queue:
                _set_url(request, rest)
            break
        if not word.startswith("-") or word == "-":
            _set_url(request, word)
            continue
        option, value = word, None
        if not word.startswith("--") and len(word) > 2:
            option, attached = word[:2], word[2:]
            if option in _SHORT_WITH_VALUE:
                value = attached
            elif all(f"-{c}" in _QUIET_FLAGS | {"-G"} for c in word[1:]):
                for c in word[1:]:
                    _flag(request, f"-{c}")
                continue
            else:
                raise ImportRefused(f"{word} is not an option this import understands.")
        if option in _REFUSED:
            reason = _REFUSED[option]
            raise ImportRefused(f"{reason[0].upper()}{reason[1:]}.")
        if option in _QUIET_FLAGS or option in ("-G", "--get"):
            _flag(request, option)
            continue
        takes_value = option in _VALUE_OPTIONS or option in _QUIET_WITH_VALUE
        if not takes_value:
            request.notes.append(f"{option} is not understood by this import and was left out.")
            continue
        if value is None:
            if not queue:
                raise ImportRefused(f"{option} needs a value.")
            value = queue.pop(0)
        if option in _QUIET_WITH_VALUE:
            request.notes.append(f"{option} only changes how curl runs; left out.")
            continue
        _take(request, option, value)
    return request


def _flag(request: _Request, option: str) -> None:
    if option in ("-G", "--get"):
        request.get = True
    elif option in ("-k", "--insecure"):
        request.notes.append("-k left out: the tool always checks the server's certificate.")
    elif option in ("-L", "--location"):
        request.notes.append("-L left out: the tool follows redirects for GET requests only.")


def _take(request: _Request, option: str, value: str) -> None:
    if option in ("-X", "--request"):
        request.method = value.upper()
    elif option in ("-H", "--header"):
        if value.startswith("@"):
            raise ImportRefused("Headers from a file (-H @file) are read by curl, not here.")
        request.headers.append(_header(value))
        if len(request.headers) > MAX_HEADERS:
            raise ImportRefused(f"The command sends over {MAX_HEADERS} headers.")
    elif option in ("-A", "--user-agent"):
        request.headers.append(("User-Agent", value))
    elif option in ("-e", "--referer"):
        request.headers.append(("Referer", value))
    elif option in ("-b", "--cookie"):
        request.notes.append("Cookies (-b) are not sent by HTTP tools; left out.")
    elif option in ("-u", "--user"):
        if ":" not in value:
            raise ImportRefused("-u needs user:password (curl would ask for the password).")
        request.user = value
    elif option == "--oauth2-bearer":
        request.bearer = value
    elif option == "--url":
        _set_url(request, value)
    elif option in ("-m", "--max-time"):
        try:
            seconds = float(value)
        except ValueError:
            raise ImportRefused(f"{option} needs a number of seconds.") from None
        request.timeout_s = min(max(seconds, 1.0), 120.0)
    else:  # the data options
        if option == "--data-urlencode":
            if "=" not in value and "@" in value:  # name@file
                raise ImportRefused("Data from a file (@file) is read by curl, not here.")
        elif option != "--data-raw" and value.startswith("@"):
            raise ImportRefused("Data from a file (@file) is read by curl, not here.")
        request.data.append((option, value))
        if sum(len(text) for _, text in request.data) > MAX_BODY_CHARS:
            raise ImportRefused(f"The data sent is over {MAX_BODY_CHARS:,} characters.")


def _header(value: str) -> tuple[str, str]:
    name, colon, content = value.partition(":")
    if not colon and name.endswith(";"):  # curl's "X-Empty;": a header without a value
        name, content = name[:-1], ""
    name, content = name.strip(), content.strip()
    if not colon and content == "" and not value.endswith(";"):
        raise ImportRefused(f"-H {value[:60]!r} is not a header (Name: value).")
    if not HEADER_NAME.match(name):
        raise ImportRefused(f"{name[:60]!r} cannot be a header name.")
    if len(content) > MAX_HEADER_CHARS:
        raise ImportRefused(f"The header {name} is over {MAX_HEADER_CHARS:,} characters.")
    return name, content


def _set_url(request: _Request, value: str) -> None:
    if request.url is not None:
        raise ImportRefused("The command names more than one URL: paste one request.")
    request.url = value


# -- the request -------------------------------------------------------------------------


def _target(request: _Request) -> tuple[str, str, list[tuple[str, str]], list[str]]:
    """Method, URL without query (path placeholders kept), its query and path segments."""
    if request.url is None:
        raise ImportRefused("The command names no URL.")
    raw = request.url.strip()
    scheme = raw.split(":", 1)[0].lower() if ":" in raw else ""
    if scheme not in ("http", "https") or not raw.lower().startswith(f"{scheme}://"):
        raise ImportRefused(
            "The URL must start with http:// or https:// (other schemes, such as file:, are "
            "not for tools)."
        )
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise ImportRefused("The URL is not a valid address.") from None
    if not parts.hostname:
        raise ImportRefused("The URL has no valid host.")
    if parts.username is not None or parts.password is not None:
        raise ImportRefused("The URL holds credentials (user:password@): use -u instead.")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host + (f":{port}" if port is not None else "")
    base = urlunsplit((parts.scheme.lower(), netloc, parts.path or "/", "", ""))
    query = parse_qsl(parts.query, keep_blank_values=True)
    method = (request.method or ("POST" if request.data and not request.get else "GET")).upper()
    if method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        raise ImportRefused(
            f"{method[:20]} is not a method HTTP tools send (GET, POST, PUT, PATCH, DELETE)."
        )
    segments = [unquote(s) for s in (parts.path or "/").split("/") if s]
    return method, base, query, segments


def _headers_and_auth(
    request: _Request,
) -> tuple[list[tuple[str, str]], dict[str, Any] | None, str | None]:
    """The headers kept, the tool's auth and the credential found (None: none, or a
    stand-in such as $TOKEN). The first credential (-u, --oauth2-bearer, Authorization, a
    header named as one: `credential_name`) becomes the auth; a tool holds one secret, so
    any other is left out, with a note, and never kept."""
    headers: list[tuple[str, str]] = []
    found: list[tuple[str, dict[str, Any], str]] = []  # (where, auth, credential)
    if request.user is not None:
        username, _, password = request.user.partition(":")
        found.append(("-u", *_basic(username, password)))
    if request.bearer is not None:
        found.append(("--oauth2-bearer", {"type": "bearer"}, request.bearer))
    for name, value in request.headers:
        lowered = name.lower()
        if lowered == "authorization":
            found.append((name, *_authorization(value)))
        elif lowered == "cookie":
            request.notes.append("The Cookie header is not sent by HTTP tools; left out.")
        elif lowered in _DROPPED_HEADERS:
            request.notes.append(f"The {name} header is set by the HTTP client; left out.")
        elif credential_name(name):
            found.append((name, {"type": "header", "header": name}, value))
        elif value == "":
            request.notes.append(f"The empty {name} header was left out.")
        elif any(n.lower() == lowered for n, _ in headers):
            raise ImportRefused(f"The command sends the header {name} twice.")
        else:
            headers.append((name, value))
    if not found:
        return headers, None, None
    (first, auth, credential), *others = found
    for where, _, _ in others:
        request.notes.append(
            f"{where} also carries a credential: left out, its value not kept (a tool holds "
            f"one secret, sent as {first}). If the API needs both, it cannot be called with "
            "this tool's secret alone."
        )
    if _STAND_IN.match(credential.strip()) or not credential:
        request.notes.append(
            f"The command names its credential as {credential.strip()[:40] or 'nothing'}: "
            "give the tool its secret."
        )
        return headers, auth, None
    return headers, auth, credential


def credential_name(name: str) -> bool:
    """Whether a header, query parameter or body field named `name` carries a credential:
    `credential_like` says so (the rule saving a tool holds its fixed values to:
    "X-RapidAPI-Key", "DD-API-KEY", "access_token", "Idempotency-Key" too), or a word of it
    is one of `_MORE_CREDENTIAL_WORDS` ("appid", "X-Session-Id"). Whole words only:
    "keyword", "monkey", "author" are not."""
    if credential_like(name):
        return True
    return not _MORE_CREDENTIAL_WORDS.isdisjoint(w.lower() for w in _WORDS.findall(name))


def _authorization(value: str) -> tuple[dict[str, Any], str]:
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        return {"type": "bearer"}, token
    if scheme.lower() == "basic" and token:
        try:
            decoded = base64.b64decode(token, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            decoded = ""
        if ":" in decoded:
            return _basic(*decoded.split(":", 1))
        if _STAND_IN.match(token):
            return {"type": "basic"}, token
    # Another scheme ("Token abc", "Bot abc"): the whole value is the secret.
    return {"type": "header", "header": "Authorization"}, value.strip()


def _basic(username: str, password: str) -> tuple[dict[str, Any], str]:
    """Basic auth sends `username:secret`; a key given as the user name with no password
    (`-u sk_live_...:`, Stripe's way) is sent whole, as the Authorization header's value."""
    if password or not username:
        return {"type": "basic", "username": username}, password
    if _STAND_IN.match(username):
        return {"type": "header", "header": "Authorization"}, username
    token = base64.b64encode(f"{username}:".encode()).decode()
    return {"type": "header", "header": "Authorization"}, f"Basic {token}"


def _body(
    request: _Request, method: str, headers: list[tuple[str, str]], query: list[tuple[str, str]]
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The JSON body (an object), and the query with -G's data added."""
    if not request.data:
        return {}, query
    json_option = any(option == "--json" for option, _ in request.data)
    content_type = next((v for n, v in headers if n.lower() == "content-type"), "")
    if request.get:
        if json_option:
            raise ImportRefused("--json with -G: the JSON would go nowhere.")
        return {}, query + _form_fields(request.data)
    if method in ("GET", "DELETE"):
        raise ImportRefused(
            f"A {method} with data: use -G to send the data in the query, or another method."
        )
    if json_option:
        text = "".join(value for _, value in request.data)
        if not any(n.lower() == "content-type" for n, _ in headers):
            headers.append(("Content-Type", "application/json"))
    else:
        text = "&".join(value for _, value in request.data)
    stripped = text.strip()
    if json_option or "json" in content_type.lower() or stripped.startswith(("{", "[")):
        try:
            body = json.loads(stripped)
        except (ValueError, RecursionError):
            raise ImportRefused("The data is not valid JSON.") from None
        if not isinstance(body, dict):
            raise ImportRefused("The JSON body must be an object: a tool sends its fields.")
        if _depth(body) > MAX_BODY_DEPTH:
            raise ImportRefused(f"The JSON body is nested over {MAX_BODY_DEPTH} levels deep.")
        return _without_credentials(body, request.notes), query
    fields: dict[str, Any] = {}
    for key, value in _form_fields(request.data):
        fields[key] = [*fields[key], value] if isinstance(fields.get(key), list) else (
            [fields[key], value] if key in fields else value
        )  # fmt: skip
    headers[:] = [(n, v) for n, v in headers if n.lower() != "content-type"]
    request.notes.append(
        "The command sends a form (key=value); the tool sends these fields as a JSON object: "
        "check that the API accepts JSON."
    )
    return _without_credentials(fields, request.notes), query


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def _without_credentials(body: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The body without the fields, at any depth, named as a credential (`credential_name`)
    and holding text or an object (`"auth": {...}`; a flag or a number stays), each noted:
    the tool's secret is sent in a header, never kept in its config."""

    def kept(value: Any, path: str) -> Any:
        if isinstance(value, list):
            return [kept(item, path) for item in value]
        if not isinstance(value, dict):
            return value
        fields = {}
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if credential_name(key) and isinstance(item, str | dict | list) and item:
                notes.append(
                    f"The body field {where[:60]!r} looks like a credential: left out, its value "
                    "not kept (a tool sends its secret in a header, config.auth: check whether "
                    "the API takes it there)."
                )
                continue
            fields[key] = kept(item, where)
        return fields

    return kept(body, "")


def _form_fields(data: list[tuple[str, str]]) -> list[tuple[str, str]]:
    fields: list[tuple[str, str]] = []
    for option, value in data:
        if option == "--data-urlencode":
            key, equals, content = value.partition("=")
            if not equals or not key:
                raise ImportRefused("--data-urlencode needs name=value here.")
            fields.append((key, content))
        else:
            pairs = parse_qsl(value, keep_blank_values=True)
            if not pairs and value:
                raise ImportRefused("The data is neither JSON nor key=value pairs.")
            fields.extend(pairs)
    return fields


def _fixed_query(query: list[tuple[str, str]], notes: list[str]) -> dict[str, Any]:
    """The query's parameters, without those named as a credential (`credential_name`): an
    HTTP tool sends its secret only in a header (config.auth has no query form), so such a
    value is left out with a note and never kept, not even as a fixed value."""
    fixed: dict[str, Any] = {}
    for key, value in query:
        if key in fixed:
            raise ImportRefused(f"The query repeats {key!r}: a tool sends each parameter once.")
        if credential_name(key) and value:
            notes.append(
                f"The query parameter {key[:60]!r} looks like a credential: left out, its value "
                "not kept. An HTTP tool sends its secret only in a header (config.auth): if the "
                "API also takes the key in a header, set auth and give the tool its secret; "
                "one that takes it only in the query cannot be given it yet."
            )
            continue
        fixed[key] = value
    return fixed


# -- marks: the values that become arguments ---------------------------------------------


def _places(
    segments: list[str],
    query: dict[str, Any],
    headers: list[tuple[str, str]],
    body: dict[str, Any],
) -> dict[str, Any]:
    places: dict[str, Any] = {}
    for segment in segments:
        if not PLACEHOLDER.fullmatch(segment):
            places.setdefault(f"path.{segment}", segment)
    places.update({f"query.{k}": v for k, v in query.items()})
    places.update({f"header.{n}": v for n, v in headers if n.lower() != "content-type"})
    places.update({f"body.{k}": v for k, v in body.items()})
    return places


def _apply_marks(
    marks: Mapping[str, Any],
    places: dict[str, Any],
    url: str,
    query: dict[str, Any],
    headers: list[tuple[str, str]],
    body: dict[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, Any], list[str], str]:
    """The argument mappings, the schema's properties and required names, and the URL with
    the marked path segments as placeholders; marked values leave the fixed ones."""
    if not isinstance(marks, Mapping):
        raise ImportRefused("Marks must be an object of {place: argument}.", path="marks")
    if len(marks) > MAX_MARKS:
        raise ImportRefused(f"Over {MAX_MARKS} marks.", path="marks")
    arguments: list[dict[str, Any]] = []
    properties: dict[str, Any] = {}
    required: list[str] = []
    parts = urlsplit(url)
    segments = parts.path.split("/")
    for placeholder in PLACEHOLDER.findall(parts.path):  # pasted with {name} already
        properties[placeholder] = {"type": "string"}
        required.append(placeholder)
        arguments.append({"argument": placeholder, "to": "path"})
    for place, mark in marks.items():
        where = f"marks.{place}"
        argument = _mark(mark, where)
        name = argument["name"]
        if name in properties:
            raise ImportRefused(f"Two arguments are named {name!r}.", path=where)
        location, _, key = str(place).partition(".")
        if place not in places:
            if location == "body" and "." in key:
                raise ImportRefused(
                    "Only top-level body fields can become arguments (a tool maps an argument "
                    "to one field of its body): mark the whole field.",
                    path=where,
                )
            if credential_name(key.rsplit(".", 1)[-1]):
                raise ImportRefused("A credential cannot be an argument.", path=where)
            raise ImportRefused("The command has no such value to mark.", path=where)
        value = places[place]
        target: dict[str, Any] = {"argument": name, "to": location}
        if location == "path":
            index = [i for i, s in enumerate(segments) if unquote(s) == key]
            if len(index) != 1:
                raise ImportRefused("The path holds this segment more than once.", path=where)
            segments[index[0]] = "{" + name + "}"
        elif location == "query":
            del query[key]
        elif location == "header":
            headers[:] = [(n, v) for n, v in headers if n != key]
        else:
            del body[key]
        if location != "path" and key != name:
            target["name"] = key
        arguments.append(target)
        schema: dict[str, Any] = {"type": argument["type"] or _type_of(value, location)}
        if argument["description"]:
            schema["description"] = argument["description"]
        if _fits(value, schema["type"]):
            schema["examples"] = [_typed(value, schema["type"])]
        properties[name] = schema
        if argument["required"]:
            required.append(name)
    url = urlunsplit((parts.scheme, parts.netloc, "/".join(segments), "", ""))
    return arguments, properties, required, url


def _mark(mark: Any, where: str) -> dict[str, Any]:
    if isinstance(mark, str):
        mark = {"name": mark}
    if not isinstance(mark, Mapping):
        raise ImportRefused("A mark is an argument name or {name, type, description}.", where)
    unknown = set(mark) - {"name", "type", "description", "required"}
    if unknown:
        raise ImportRefused(f"Unknown mark field {sorted(unknown)[0][:40]!r}.", path=where)
    name = mark.get("name")
    if not isinstance(name, str) or not _ARGUMENT_NAME.match(name):
        raise ImportRefused(
            "An argument's name is 1-64 letters, digits or _, not starting with a digit.",
            path=where,
        )
    kind = mark.get("type")
    if kind is not None and kind not in TYPES:
        raise ImportRefused(f"The type must be one of {', '.join(TYPES)}.", path=where)
    description = mark.get("description") or ""
    if not isinstance(description, str) or len(description) > 1000:
        raise ImportRefused("The description must be text of at most 1,000 characters.", where)
    required = mark.get("required", True)
    if not isinstance(required, bool):
        raise ImportRefused("required must be true or false.", path=where)
    return {"name": name, "type": kind, "description": description, "required": required}


def _type_of(value: Any, location: str) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    if value is None:
        return "string"
    text = str(value)
    if re.fullmatch(r"-?(0|[1-9][0-9]{0,15})", text):
        return "integer"
    if re.fullmatch(r"-?[0-9]{1,15}\.[0-9]{1,15}", text):
        return "number"
    if text in ("true", "false"):
        return "boolean"
    return "string"


def _typed(value: Any, kind: str) -> Any:
    if not isinstance(value, str):
        return value
    return {
        "integer": lambda v: int(v),
        "number": lambda v: float(v),
        "boolean": lambda v: v == "true",
    }.get(kind, lambda v: v)(value)


def _fits(value: Any, kind: str) -> bool:
    return _type_of(value, "") == kind or (kind == "number" and _type_of(value, "") == "integer")


# -- the draft ---------------------------------------------------------------------------


def _check_config(config: dict[str, Any]) -> None:
    """ImportRefused unless `config` is a valid HTTP tool config (saving checks it again,
    with the tenant's whole configuration)."""
    try:
        HttpToolConfig.model_validate(config)
    except pydantic.ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"]) or "config"
        raise ImportRefused(
            "The command does not make a valid HTTP tool (check the URL and headers).",
            path=f"config.{where}" if where != "config" else where,
        ) from None


def _tool_name(method: str, path: str) -> str:
    words = [
        re.sub(r"[^A-Za-z0-9]+", "_", segment).strip("_").lower()
        for segment in path.split("/")
        if segment and not PLACEHOLDER.fullmatch(segment) and not segment.isdigit()
    ]
    words = [w for w in words if w and not re.fullmatch(r"v[0-9]+", w)][-3:]
    return "_".join([method.lower(), *words])[:64] or method.lower()
