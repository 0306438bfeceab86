"""`manage.py chat <agent> --tenant <slug>`: chat with an agent or crew in the terminal.

The same records as the browser's chat: a conversation owned by the member (`--user`, by
default the tenant's first owner), a run per message started through `agents.runs`
with that member's permissions, its events as they are stored. The run is executed in this
process (no worker needed), its answer streamed as it comes, its tool calls shown; a call
that needs approval is asked here, and decided through the same service as the web's
buttons (the member must be allowed to decide it). Lines: a message, `/new` for a new
conversation, `/quit` (or end of input) to leave.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from contextlib import aclosing
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from agents import runs, services
from agents.models import Agent, Approval, ApprovalStatus, Conversation, Crew, Run
from agents.runs import execute_run_async, iter_run_events, request_text
from tenancy import rls
from tenancy.models import Membership, Role, Tenant

SHOWN_CHARS = 300  # of a tool's arguments or result


class Command(BaseCommand):
    help = "Chat with an agent or crew in the terminal (streamed, tool calls shown)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("agent", help="The agent's (or crew's) slug.")
        parser.add_argument("--tenant", required=True, help="The tenant's slug.")
        parser.add_argument("--user", help="The member who chats (default: the first owner).")
        parser.add_argument("--conversation", type=int, help="Go on with this conversation.")

    def handle(self, *args, agent: str, tenant: str, user: str | None, **options) -> None:
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"No tenant {tenant!r}.")
        with rls.tenant_scope(found.pk):
            member = _member(found, user)
            target = (
                Agent.objects.filter(tenant=found, slug=agent).first()
                or Crew.objects.filter(tenant=found, slug=agent).first()
            )
            if target is None:
                raise CommandError(f"{found.slug} has no agent or crew {agent!r}.")
            conversation = None
            if options.get("conversation"):
                conversation = Conversation.objects.filter(
                    tenant=found, pk=options["conversation"], owner_user=member
                ).first()
                if conversation is None:
                    raise CommandError(f"{member} has no conversation {options['conversation']}.")
            chat = TerminalChat(self, found, member, target, conversation)
            asyncio.run(chat.talk())


def _member(tenant: Tenant, username: str | None):
    memberships = Membership.objects.filter(tenant=tenant, user__is_active=True)
    if username:
        membership = memberships.filter(user__username=username).select_related("user").first()
        if membership is None:
            raise CommandError(f"{username!r} is not an active member of {tenant.slug}.")
    else:
        membership = (
            memberships.filter(role=Role.OWNER).select_related("user").order_by("pk").first()
        )
        if membership is None:
            raise CommandError(f"{tenant.slug} has no owner; name a member with --user.")
    return membership.user


class TerminalChat:
    def __init__(self, command: BaseCommand, tenant, user, target, conversation) -> None:
        self.out, self.tenant, self.user, self.target = command.stdout, tenant, user, target
        self.conversation = conversation
        self.which = "agent" if isinstance(target, Agent) else "crew"

    def say(self, text: str, ending: str = "\n") -> None:
        self.out.write(text, ending=ending)
        self.out.flush()

    async def talk(self) -> None:
        self.say(f"Chatting with {self.target.name} ({self.tenant.slug}) as {self.user}.")
        self.say("Type a message; /new starts a new conversation, /quit leaves.")
        while True:
            line = await _read_line("you> ")
            if line is None or line.strip() == "/quit":
                return
            if line.strip() == "/new":
                self.conversation = None
                self.say("(a new conversation)")
                continue
            if line.strip():
                await self.turn(line.strip())

    async def turn(self, text: str) -> None:
        with rls.tenant_scope(self.tenant.pk):
            try:
                run = await sync_to_async(self._start)(text)
            except (ValidationError, PermissionDenied, Http404) as exc:
                self.say(f"! {_message(exc)}")
                return
            after = 0
            while True:
                after = await self._follow(run, after)
                run = await sync_to_async(Run.objects.get)(pk=run.pk)
                if run.status != "awaiting_approval" or not await self._decide(run):
                    break
            if run.status not in ("succeeded", "awaiting_approval"):
                self.say(f"! The run {run.status}: {run.error or 'no answer'} (run {run.pk})")

    def _start(self, text: str) -> Run:
        if self.conversation is None:
            self.conversation = services.conversation_save(
                tenant=self.tenant,
                changes={self.which: self.target, "title": text[:80]},
                owner_user=self.user,
            )
        return runs.run_start(
            tenant=self.tenant,
            input=text,
            conversation=self.conversation,
            initiated_by=self.user,
            enqueue=False,
            **{self.which: self.target},
        )

    async def _follow(self, run: Run, after: int) -> int:
        """Execute the run here and show its events until it ends or parks; returns the
        number of the last event shown."""
        loop = asyncio.get_running_loop()
        executing: list[asyncio.Task] = []

        def execute() -> None:
            executing.append(loop.create_task(execute_run_async(run.pk, tenant_id=run.tenant_id)))

        # A run parked for approval ends no stream: once this process's execution is over
        # and a beat has passed quietly, what it stored has been shown.
        events = iter_run_events(run, after, heartbeat_s=0.3, execute=execute)
        if after:  # resumed: nothing new is executed by the stream's start
            execute()
        answering = False
        async with aclosing(events) as stream:
            async for event in stream:
                if event["type"] == "heartbeat":
                    # (a worker may have claimed it first: then it is followed to its end)
                    if executing and executing[0].done() and not await _under_way(run):
                        break
                    continue
                after = event.get("seq", after)
                answering = self._show(event, answering)
        if answering:
            self.say("")
        if executing:
            await executing[0]
        return after

    def _show(self, event: dict[str, Any], answering: bool) -> bool:
        """Print one event; returns whether an answer's text is being written."""
        kind, payload = event["type"], event.get("payload") or {}
        if kind == "text.delta":
            if not answering:
                self.say(f"{self.target.slug}> ", ending="")
            self.say(payload.get("text", ""), ending="")
            return True
        if answering and kind in ("tool.started", "approval.required", "run.failed"):
            self.say("")
            answering = False
        if kind == "tool.started":
            self.say(f"  [{payload.get('name')} {_short(payload.get('arguments'))}]")
        elif kind == "tool.completed":
            error = payload.get("error")
            shown = f"error: {error}" if error else _short(payload.get("result"))
            self.say(f"  [{payload.get('name')} -> {shown}]")
        elif kind == "approval.required":
            self.say(f"  [{payload.get('name')} waits for approval]")
        return answering

    async def _decide(self, run: Run) -> bool:
        """Ask about each pending approval; True when all were decided (the run goes on)."""
        pending = await sync_to_async(list)(
            Approval.objects.filter(run=run, status=ApprovalStatus.PENDING).order_by("pk")
        )
        for approval in pending:
            if approval.prepared_request is not None:  # an HTTP tool's exact request
                self.say(textwrap.indent(request_text(approval.prepared_request), "  "))
            call = f"{approval.tool_name} {_short(approval.arguments)}"
            answer = await _read_line(f"Approve {call}? [y/N] ")
            if answer is None:
                self.say(f"(left waiting: approve it in the browser or REST, run {run.pk})")
                return False
            approved = answer.strip().lower() in ("y", "yes")
            try:
                await sync_to_async(runs.approval_decide)(
                    tenant=self.tenant, approval=approval, approved=approved, by=self.user
                )
            except (ValidationError, PermissionDenied) as exc:
                self.say(f"! {_message(exc)}")
                return False
        return True


async def _under_way(run: Run) -> bool:
    status = await sync_to_async(
        Run.objects.filter(pk=run.pk).values_list("status", flat=True).first
    )()
    return status in ("queued", "running")


async def _read_line(prompt: str) -> str | None:
    """A line from standard input (None at its end), read off the event loop."""
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = await asyncio.to_thread(sys.stdin.readline)
    return line.rstrip("\n") if line else None


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def _message(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    return str(exc) or type(exc).__name__
