"""How a remote agent's messages travel (docs/remote-agents.md): one JSON object out, one
back, per round — as a POST to its server through the guarded egress, or as JSON lines over
the stdin/stdout of a command the operator allow-lists (`REMOTE_AGENT_COMMANDS`; a tenant
only names one), started with none of the platform's environment and, when the platform runs
as root, as another account (`REMOTE_AGENT_COMMAND_USER`, `nobody`). Both check the size
and time of every answer and say what went wrong in words of our own; neither lets a
library's error text or a secret through.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from tools.runtime.context import REDACTED
from tools.runtime.egress import (
    EgressError,
    EgressRefused,
    EgressResponse,
    EgressTimeout,
    GuardedHttpClient,
    ResponseTooLarge,
)

REQUEST_TIMEOUT_S = 60.0  # per round, including the agent's thinking time
HEALTH_TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 1_000_000
EXIT_WAIT_S = 2.0  # a command's grace to exit once its stdin is closed
# What a command's environment takes from the platform's: where programs are, the locale and
# the time zone. Nothing else (its keys, database and Redis URLs, tracing headers...);
# HOME is the account's own (COMMAND_ENV sets the rest).
COMMAND_ENV_KEYS = ("PATH", "LANG", "LANGUAGE", "TZ")
COMMAND_ENV_PREFIXES = ("LC_",)
COMMAND_ENV = {"PYTHONUNBUFFERED": "1"}  # a Python agent's lines are not held in a buffer
COMMAND_USER = "nobody"  # the account commands run as when the platform runs as root


class RemoteFailure(Exception):
    """The exchange cannot go on; str(exc) is the run's error."""


class Transport(Protocol):
    async def send(self, body: dict[str, Any]) -> Any:
        """One round: `body` out, the agent's answer (parsed JSON) back."""
        ...

    async def close(self) -> None: ...


class HttpTransport:
    def __init__(self, url: str, egress: GuardedHttpClient, token: str | None) -> None:
        self.url, self.egress, self.token = url, egress, token
        self.headers = {"accept": "application/json"}
        if token:
            self.headers["authorization"] = f"Bearer {token}"

    async def send(self, body: dict[str, Any]) -> Any:
        try:
            response = await self.egress.request(
                "POST",
                self.url,
                headers=self.headers,
                json=body,
                timeout_s=REQUEST_TIMEOUT_S,
                max_bytes=MAX_RESPONSE_BYTES,
            )
        except EgressError as exc:
            raise RemoteFailure(egress_failure(exc)) from None
        if not 200 <= response.status_code < 300:
            raise RemoteFailure(status_failure(response))
        try:
            return response.json()
        except (ValueError, RecursionError):  # (nested too deep)
            raise RemoteFailure(
                f"remote agent sent invalid JSON (HTTP {response.status_code})"
            ) from None

    async def close(self) -> None:
        return None


class CommandTransport:
    """JSON lines with a process started from an allow-listed argv: one line per message
    each way. Started at the first round, kept for the run's rounds in this worker, closed
    at the end; a run resumed elsewhere starts it again and sends the message it owes (the
    agent keeps what it needs in the `state` it gets back, as over HTTP). It starts with
    none of the platform's environment (command_environment) and, when the platform runs
    as root, as `user` (command_account)."""

    def __init__(self, name: str, argv: Sequence[str], *, user: str = COMMAND_USER) -> None:
        self.name, self.argv, self.user = name, tuple(argv), user
        self.process: asyncio.subprocess.Process | None = None

    async def send(self, body: dict[str, Any]) -> Any:
        process = await self._started()
        line = json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                process.stdin.write(line.encode("utf-8"))  # type: ignore[union-attr]
                await process.stdin.drain()  # type: ignore[union-attr]
                answer = await process.stdout.readline()  # type: ignore[union-attr]
        except TimeoutError:
            raise RemoteFailure(
                f"remote agent command {self.name!r} did not answer in {REQUEST_TIMEOUT_S:g} s"
            ) from None
        except (ValueError, asyncio.LimitOverrunError):  # a line over the reader's limit
            raise RemoteFailure(
                f"remote agent reply too large: over {MAX_RESPONSE_BYTES} bytes"
            ) from None
        except (BrokenPipeError, ConnectionResetError):
            answer = b""
        if not answer:
            code = await self._exit_code()
            raise RemoteFailure(
                f"remote agent command {self.name!r} ended without answering (exit {code})"
            )
        try:
            return json.loads(answer)
        except (ValueError, RecursionError):  # (nested too deep)
            raise RemoteFailure(f"remote agent command {self.name!r} sent invalid JSON") from None

    async def close(self) -> None:
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(Exception):
            process.stdin.close()  # type: ignore[union-attr]
        try:
            async with asyncio.timeout(EXIT_WAIT_S):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def _started(self) -> asyncio.subprocess.Process:
        if self.process is not None and self.process.returncode is None:
            return self.process
        if not self.argv:
            raise RemoteFailure(
                f"remote agent command {self.name!r} is not one the operator allow-lists "
                "(REMOTE_AGENT_COMMANDS)"
            )
        account = command_account(self.name, self.user)
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=command_environment(os.environ, home=account.home),
                limit=MAX_RESPONSE_BYTES + 1,
                **account.popen,
            )
        except OSError:
            raise RemoteFailure(
                f"remote agent command {self.name!r} could not be started"
            ) from None
        return self.process

    async def _exit_code(self) -> str:
        process = self.process
        if process is None:
            return "?"
        try:
            async with asyncio.timeout(EXIT_WAIT_S):
                await process.wait()
        except TimeoutError:
            return "still running"
        return str(process.returncode)


@dataclass(frozen=True)
class CommandAccount:
    """Whom a command runs as: `popen` holds Popen's user, group and extra_groups when it is
    switched to (empty: the platform's own identity), `home` its HOME."""

    home: str
    popen: dict[str, Any] = field(default_factory=dict)


def command_account(name: str, user: str) -> CommandAccount:
    """As root: `user`'s account (a name or a uid), in its primary group only, so the
    command cannot read what only the platform may (the data directory's key file, its
    processes' /proc entries). Otherwise the platform's own identity — an unprivileged
    process cannot switch — with HOME the temporary directory. RemoteFailure if `user`
    names no account here."""
    if os.geteuid() != 0:
        return CommandAccount(home=tempfile.gettempdir())
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise RemoteFailure(
            f"remote agent command {name!r} cannot be started: the account it runs as "
            f"({user!r}, REMOTE_AGENT_COMMAND_USER) does not exist"
        ) from None
    return CommandAccount(
        home=entry.pw_dir,
        popen={"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []},
    )


def command_environment(platform_env: Mapping[str, str], *, home: str) -> dict[str, str]:
    """A command's whole environment: COMMAND_ENV_KEYS and LC_* from the platform's, HOME,
    COMMAND_ENV."""
    kept = {
        key: value
        for key, value in platform_env.items()
        if key in COMMAND_ENV_KEYS or key.startswith(COMMAND_ENV_PREFIXES)
    }
    return {**kept, "HOME": home, **COMMAND_ENV}


# -- health ------------------------------------------------------------------------------
async def http_health(
    url: str, egress: GuardedHttpClient, *, token: str | None = None
) -> tuple[bool, str]:
    """GET <url>/health: (True, "ok") when it answers 2xx with {"status": "ok"}, else
    (False, why). One request, at most HEALTH_TIMEOUT_S."""
    if not url:
        return False, "no remote URL is configured"
    headers = {"accept": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    try:
        response = await egress.request(
            "GET", health_url(url), headers=headers, timeout_s=HEALTH_TIMEOUT_S, max_bytes=64_000
        )
    except EgressError as exc:
        return False, scrub(egress_failure(exc), token)
    if not 200 <= response.status_code < 300:
        return False, scrub(status_failure(response), token)
    try:
        body = response.json()
    except (ValueError, RecursionError):  # (nested too deep)
        return False, f"health answer is not JSON (HTTP {response.status_code})"
    return _health_verdict(body, token)


async def command_health(
    name: str, argv: Sequence[str], *, user: str = COMMAND_USER
) -> tuple[bool, str]:
    """Start the command (as CommandTransport does), send {"type": "health"}, expect
    {"type": "health", "status": "ok"} within HEALTH_TIMEOUT_S; (ok, why)."""
    transport = CommandTransport(name, argv, user=user)
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            body = await transport.send({"type": "health", "protocol": 1})
    except RemoteFailure as exc:
        return False, str(exc)
    except TimeoutError:
        return False, f"remote agent command {name!r} did not answer in {HEALTH_TIMEOUT_S:g} s"
    finally:
        await transport.close()
    return _health_verdict(body, None)


def _health_verdict(body: Any, token: str | None) -> tuple[bool, str]:
    status = body.get("status") if isinstance(body, dict) else None
    if status != "ok":
        return False, scrub(f"health status is {clip(repr(status), 80)}, not 'ok'", token)
    return True, "ok"


def health_url(url: str) -> str:
    """`url` with `/health` appended to its path (query kept, fragment dropped)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/health", fragment=""))


# -- words of our own ---------------------------------------------------------------------
def status_failure(response: EgressResponse) -> str:
    detail = ""
    try:
        body = response.json()
    except (ValueError, RecursionError):  # (nested too deep)
        body = None
    if isinstance(body, dict):
        for key in ("message", "error", "detail"):
            if isinstance(body.get(key), str) and body[key]:
                detail = body[key]
                break
    elif response.content and "json" not in response.headers.get("content-type", ""):
        detail = response.text.strip()
    message = f"remote agent answered HTTP {response.status_code}"
    return f"{message}: {clip(detail, 500)}" if detail else message


def egress_failure(exc: EgressError) -> str:
    if isinstance(exc, EgressRefused):
        return f"remote agent refused by egress policy: {exc}"
    if isinstance(exc, EgressTimeout):
        return f"remote agent did not answer in time: {exc}"
    if isinstance(exc, ResponseTooLarge):
        return f"remote agent reply too large: {exc}"
    return f"remote agent unreachable: {exc}"


def scrub(text: str, token: str | None) -> str:
    return text.replace(token, REDACTED) if token else text


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
