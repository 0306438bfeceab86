"""ToolRegistry: the one way every entry point executes tools."""

from __future__ import annotations

import asyncio
import difflib
import logging
import time
import traceback
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from tools.runtime.context import RunContext
from tools.runtime.formats import Format, definition_for
from tools.runtime.prepared_request import PreparedRequest
from tools.runtime.rate_limit import RateLimited
from tools.runtime.tool import Tool, ToolCall, ToolFailed, ToolResult

# Sync handlers run here, not in the loop's default executor, so a handler that overruns
# its timeout never holds up the loop's shutdown (asyncio.run joins the default executor).
_SYNC_HANDLERS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="tool")
logger = logging.getLogger(__name__)


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.register(item)

    # -- contents ------------------------------------------------------------------
    def register(self, tool: Tool, *, replace: bool = False) -> Tool:
        if tool.name in self._tools and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise KeyError(self._unknown(name)) from None

    def has(self, name: str) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        return list(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self):
        return iter(self._tools.values())

    def filter(
        self,
        *,
        names: Iterable[str] | None = None,
        tags: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> ToolRegistry:
        """A new registry: tools named in `names` OR carrying any of `tags` (all tools when
        both are None), minus those named in `exclude`. Unknown names are ignored."""
        wanted = set(names) if names is not None else None
        wanted_tags = set(tags) if tags is not None else None
        excluded = set(exclude or ())
        chosen = []
        for item in self._tools.values():
            if item.name in excluded:
                continue
            everything = wanted is None and wanted_tags is None
            named = bool(wanted) and item.name in wanted
            tagged = bool(wanted_tags) and bool(item.tags & wanted_tags)
            if everything or named or tagged:
                chosen.append(item)
        return ToolRegistry(chosen)

    def definitions(self, format: Format | str) -> list[dict[str, Any]]:
        """Tool definitions exactly as the provider's API takes them."""
        return [definition_for(item, Format(format)) for item in self._tools.values()]

    # -- execution -------------------------------------------------------------------
    async def execute(self, call: ToolCall, ctx: RunContext) -> ToolResult:
        """Run one call. Never raises for tool trouble: unknown names, invalid arguments, a
        tool over its rate limit, handler exceptions and timeouts all come back as
        ToolResult.error for the model (`rate_limited` set for the rate limit)."""
        started = time.perf_counter()
        ctx = replace(ctx, call_id=call.id)
        emit = ctx.events
        if emit is not None:
            emit(
                "tool.started",
                {
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": ctx.secrets.redact(call.arguments),
                },
            )
        result, error = await self._run(call, ctx)
        limited = error if isinstance(error, RateLimited) else None
        if limited is not None:
            error = limited.message
            if emit is not None:
                emit("tool.rate_limited", rate_limited_payload(call.id, limited))
        if ctx.secrets:
            result, error = ctx.secrets.redact(result), ctx.secrets.redact(error)
        item = self._tools.get(call.name)
        outcome = ToolResult(
            call_id=call.id,
            name=call.name,
            result=_viewed(item, result) if error is None else None,
            error=error,
            latency_ms=(time.perf_counter() - started) * 1000,
            rate_limited=limited,
            data=result,
        )
        if emit is not None:
            emit(
                "tool.completed",
                {
                    "call_id": call.id,
                    "name": call.name,
                    "result": outcome.result,
                    "error": outcome.error,
                    "latency_ms": round(outcome.latency_ms, 3),
                },
            )
        return outcome

    async def execute_all(self, calls: Sequence[ToolCall], ctx: RunContext) -> list[ToolResult]:
        """Run calls concurrently; results in the order of `calls`."""
        if len(calls) == 1:
            return [await self.execute(calls[0], ctx)]
        return list(await asyncio.gather(*(self.execute(call, ctx) for call in calls)))

    def prepare(self, call: ToolCall, ctx: RunContext) -> PreparedRequest:
        """The exact request `call` would send, for a human to confirm (tools with a
        preparer), the context's secrets masked in it. Nothing is sent or counted. Raises
        ToolFailed saying why there is none: an unknown tool, invalid arguments, a value the
        request cannot carry."""
        item = self._tools.get(call.name)
        if item is None:
            raise ToolFailed(self._unknown(call.name))
        if item.preparer is None:
            raise ToolFailed(f"{call.name} does not send a request that can be prepared")
        problem = _invalid(item, call, ctx)
        if problem is not None:
            raise ToolFailed(problem)
        try:
            prepared = item.preparer.prepare(call.arguments, replace(ctx, call_id=call.id))
        except ToolFailed:
            raise
        except Exception as exc:
            raise ToolFailed(_unexpected(exc, call, ctx, "preparing the request of")) from None
        return prepared.redacted(ctx.secrets)

    async def _run(self, call: ToolCall, ctx: RunContext) -> tuple[Any, str | RateLimited | None]:
        item = self._tools.get(call.name)
        if item is None:
            return None, self._unknown(call.name)
        arguments = call.arguments
        # A prepared request was checked when it was prepared, from the arguments completed
        # by the run's frame; it is sent as it is, whatever the call's arguments say now.
        problem = _invalid(item, call, ctx) if call.prepared is None else None
        if problem is not None:
            return None, problem
        if call.prepared is not None and item.preparer is None:  # changed since it was approved
            return None, f"{call.name} no longer sends prepared requests; nothing was sent"
        # Counted here, the one place every call passes, once it is sure to run: an invalid
        # call never reaches what the limit protects, and a call that waits for approval
        # gets here only once approved (when it executes, not when it was asked for).
        limit = item.capability.rate_limit_per_minute
        if limit is not None and ctx.rate_limiter is not None:
            try:
                limited = await ctx.rate_limiter.take(ctx.tenant_id, item.name, limit)
            except Exception as exc:  # fail closed: a call not counted could exceed the limit
                return None, _unexpected(exc, call, ctx, "counting the calls of")
            if limited is not None:
                return None, limited
        timeout = min(item.capability.timeout_s, ctx.limits.max_tool_timeout_s)
        try:
            async with asyncio.timeout(timeout):
                if call.prepared is not None:  # confirmed: exactly this request is sent
                    value = await item.preparer.send(call.prepared, ctx)
                elif item.is_async:
                    value = await item.handler(arguments, ctx)
                else:  # sync handlers must not block the loop; the thread runs on if it times out
                    value = await asyncio.get_running_loop().run_in_executor(
                        _SYNC_HANDLERS, item.handler, arguments, ctx
                    )
        except TimeoutError:
            return None, f"timed out after {timeout:g} s"
        except ToolFailed as exc:
            return None, str(exc) or type(exc).__name__
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the model sees that it failed; the run goes on
            return None, _unexpected(exc, call, ctx, "running")
        return value, None

    def _unknown(self, name: str) -> str:
        close = difflib.get_close_matches(name, self._tools, n=3, cutoff=0.5)
        if close:
            return f"unknown tool {name!r}; did you mean {', '.join(close)}?"
        available = ", ".join(sorted(self._tools)[:20]) or "none"
        return f"unknown tool {name!r}; available tools: {available}"


def rate_limited_payload(call_id: str, limited: RateLimited) -> dict[str, Any]:
    """The `tool.rate_limited` event of a refused call."""
    return {
        "call_id": call_id,
        "name": limited.tool,
        "limit": limited.limit,
        "retry_after_s": limited.retry_after_s,
    }


def _viewed(item: Tool | None, result: Any) -> Any:
    """What the model sees of a result: the tool's view of it (an HTTP tool's model_view)."""
    if item is None or item.view is None:
        return result
    return item.view(result)


def _invalid(item: Tool, call: ToolCall, ctx: RunContext) -> str | None:
    """Why the call's arguments are not valid for `item`, or None."""
    if not isinstance(call.arguments, dict):
        return "arguments must be a JSON object"
    try:
        problem = item.validate(call.arguments)
    except Exception as exc:
        return _unexpected(exc, call, ctx, "validating the arguments of")
    return None if problem is None else f"invalid arguments: {problem}"


def _unexpected(exc: Exception, call: ToolCall, ctx: RunContext, doing: str) -> str:
    """Log an exception nobody wrote for the model (secrets scrubbed) and return a generic
    message: its text may quote files, documents or credentials (ToolFailed is the way
    to tell the model why)."""
    detail = ctx.secrets.redact("".join(traceback.format_exception(exc)))
    logger.error(
        "%s tool %s failed (tenant %s, run %s, call %s):\n%s",
        doing, call.name, ctx.tenant_id, ctx.run_id, call.id, detail,
    )  # fmt: skip
    where = f" (run {ctx.run_id})" if ctx.run_id else ""
    return f"the tool failed unexpectedly{where}; the details are in the server log"
