"""The exact request a tool call will send, prepared before it is sent so a human can
confirm it.

A tool that sends one HTTP request per call (an HTTP tool) has a `preparer`: `prepare` maps
the arguments and the context into a PreparedRequest (pure: the same arguments, context and
configuration give the same value), and `send` sends exactly that request. The credential is
never in it: the header that will carry it shows MASK, and `send` puts the tool's credential
there. So the request can be stored, shown on an approval card and approved, and approving
sends exactly the approved method, URL, headers and body — plus the credential.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tools.runtime.context import RunContext, SecretAccessor

MASK = "***"


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    method: str
    url: str  # with its query string, encoded as it is sent
    headers: tuple[tuple[str, str], ...]  # in the order sent; the credential's header: masked
    body: str | None = None  # the exact body text, sent UTF-8 encoded; None: no body
    credential_header: str | None = None  # the header `send` fills with the tool's credential

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored on an approval and shown on every face (headers as
        [name, value] pairs, in order: JSON objects in PostgreSQL do not keep key order)."""
        return {
            "method": self.method,
            "url": self.url,
            "headers": [[name, value] for name, value in self.headers],
            "body": self.body,
            "credential_header": self.credential_header,
        }

    @classmethod
    def from_dict(cls, data: Any) -> PreparedRequest:
        """ValueError if `data` is not a `to_dict` shape."""
        try:
            headers = tuple((str(name), str(value)) for name, value in data["headers"])
            request = cls(
                method=str(data["method"]),
                url=str(data["url"]),
                headers=headers,
                body=data["body"],
                credential_header=data.get("credential_header"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a prepared request: {exc}") from None
        if request.body is not None and not isinstance(request.body, str):
            raise ValueError("not a prepared request: body must be text or null")
        return request

    def as_text(self) -> str:
        """The request as HTTP writes it: the request line, the headers, a blank line and
        the body (what approval cards and MCP results show)."""
        lines = [f"{self.method} {self.url}", *(f"{name}: {value}" for name, value in self.headers)]
        body = "" if self.body is None else f"\n\n{self.body}"
        return "\n".join(lines) + body

    def redacted(self, secrets: SecretAccessor) -> PreparedRequest:
        """With every secret of `secrets` masked wherever it appears (a model could have put
        one in an argument): this is the copy stored, shown and then sent."""
        return PreparedRequest.from_dict(secrets.redact(self.to_dict())) if secrets else self


class PreparesRequests(Protocol):
    def prepare(self, arguments: dict[str, Any], ctx: RunContext) -> PreparedRequest:
        """The request these (valid) arguments map to; ToolFailed if they cannot."""
        ...

    async def send(self, request: PreparedRequest, ctx: RunContext) -> Any:
        """Send exactly `request` (plus the credential) and return the tool's result."""
        ...
