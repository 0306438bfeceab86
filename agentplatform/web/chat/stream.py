"""The chat's live answer: a run's events as HTML fragments over Server-Sent Events.

Each SSE message (`id: <seq>`, so a reconnecting EventSource resumes with Last-Event-ID)
carries JSON `{"ops": [...]}`; static/js/chat.js applies each op to the page:

- `{"op": "append", "target": id, "html": ...}`: insert at the end of element `id`;
- `{"op": "replace", "target": id, "html": ..., "parent": id}`: replace element `id`
  (append to `parent` when it is not on the page yet);
- `{"op": "place", "target": id, "html": ..., "after": id}`: replace element `id`, or else
  put it where the reloaded page has it: at the start of the turn after the one holding
  element `after` (that turn itself when it is the last), after the summaries there;
- `{"op": "end"}`: the run ended; close the stream, re-enable the composer.

A steering message the loop took (`run.steered`) joins the steps and leaves the queued list;
when the run ends, the queued list is rendered again and a turn started from it (a queued
message, a late steer) is appended to the thread, with its own stream.

Everything is rendered here, on the server: text deltas escaped, a finished round's text as
sanitized markdown replacing what streamed, tool results as escaped JSON. The iterator runs
on the event loop (no thread of its own, see agentplatform.asgi_handler); its database
reads go through `stream_read`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from django.template.loader import render_to_string
from django.utils.html import escape

from agentplatform.web.activity.verification import with_verdict
from agentplatform.web.chat.thread import (
    TERMINAL,
    MemberStep,
    SteerNote,
    TextSegment,
    ToolCard,
    Turn,
    apply_member_event,
    approvals_for,
    complete_tool,
    connect_step,
    dom_key,
    left_out_note,
    member_event,
    place_tool,
)
from agents import selectors
from agents.models import Approval, ApprovalStatus, ConversationSummary, Run
from agents.runs import (
    TERMINAL_EVENTS,
    heartbeat_seconds,
    iter_run_events,
    may_resume,
    queued_messages,
    turn_after,
)
from agents.runtime.spec import RunStatus
from base.stream_reads import stream_read
from tenancy.models import Membership
from tenancy.policy import Principal

RETRY_MS = 3000
APPROVAL_WAIT_S = 5.0  # for approval rows not there yet (none: they commit before the event)
TEMPLATE = "web/chat/thread.html"


def message(ops: list[dict[str, Any]], *, id: int | None = None) -> bytes:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}data: {json.dumps({'ops': ops}, separators=(',', ':'))}\n\n".encode()


class RunStream:
    """The state one open stream keeps: the round being streamed, the tool cards and
    approvals already shown."""

    def __init__(
        self, run: Run, *, conversation_id: int, tenant_slug: str, membership: Membership
    ) -> None:
        self.run = run
        self.principal = Principal.of_membership(membership)
        self.context = {
            "conversation_id": conversation_id,
            "tenant_slug": tenant_slug,
            "may_send": membership.has_role("member"),
        }
        self.round = 0
        self.has_text = False
        self.cards: list[ToolCard] = []  # the tool cards on the page (a program's inside it)
        self.members: dict[str, MemberStep] = {}
        self.approvals_shown: set[int] = set()
        self.connect_asked = False  # a call waits for the person's account (not an approval)

    @property
    def steps_id(self) -> str:
        return f"run-{self.run.pk}-steps"

    def segment_id(self, round: int) -> str:
        return f"run-{self.run.pk}-seg-{round}"

    def render(self, partial: str, **context: Any) -> str:
        return render_to_string(
            f"{TEMPLATE}#{partial}", {**self.context, "run": self.run, **context}
        )

    async def events(self, after_seq: int) -> AsyncIterator[bytes]:
        yield f"retry: {RETRY_MS}\n\n".encode()
        self.round, self.has_text, started = await stream_read(_resume_point)(
            self.run.pk, after_seq
        )
        self.cards = started
        ended = False
        events = iter_run_events(self.run, after_seq, heartbeat_s=heartbeat_seconds())
        async with aclosing(events):
            async for event in events:
                if event["type"] == "heartbeat":
                    yield b": heartbeat\n\n"
                    continue
                ops = await self.ops(event["type"], event["payload"])
                ended = event["type"] in TERMINAL_EVENTS
                if ended:
                    ops.append({"op": "end"})
                if ops:
                    yield message(ops, id=event["seq"])
        if not ended:  # resumed after the end (nothing left to replay): say it is over
            run = await stream_read(_fresh_run)(self.run)
            if run.status in TERMINAL:
                self.run = run
                yield message([await self.footer(), {"op": "end"}])

    async def ops(self, type: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        if type == "inference.started":
            self.round = payload.get("round", self.round + 1)
            html = self.render("segment", segment=TextSegment(round=self.round), streaming=True)
            return [  # (a round started again, resumed, takes the place of its empty start)
                {
                    "op": "replace",
                    "target": self.segment_id(self.round),
                    "html": html,
                    "parent": self.steps_id,
                },
                self.status("Thinking…"),
            ]
        if type == "text.delta":
            text = payload.get("text", "")
            self.has_text = self.has_text or bool(text)
            return [{"op": "append", "target": self.segment_id(self.round), "html": escape(text)}]
        if type == "inference.completed":
            if payload.get("error"):
                return []
            segment = TextSegment(round=self.round, text=payload.get("text") or "", complete=True)
            html = self.render("segment", segment=segment)
            return [
                {
                    "op": "replace",
                    "target": self.segment_id(self.round),
                    "html": html,
                    "parent": self.steps_id,
                }
            ]
        if type == "tool.started":
            card, program = place_tool(self.cards, payload, started=True)
            return [self.tool_op(card, program), self.status(f"Running {card.name}…")]
        if type == "tool.completed":
            card, program = place_tool(self.cards, payload, started=False)
            complete_tool(card, payload)
            return [self.tool_op(card, program)]
        if member_event(type, payload):
            key = payload.get("key", "")
            step = self.members[key] = apply_member_event(self.members.get(key), type, payload)
            if step.status:
                return [self.member_op(step)]
            return [self.member_op(step), self.status(f"{step.member} is working…")]
        if type == "run.steered":
            note = SteerNote(payload.get("id", 0), str(payload.get("text", "")))
            return [
                {
                    "op": "append",
                    "target": self.steps_id,
                    "html": self.render("steer_note", note=note),
                },
                {"op": "replace", "target": f"queued-{note.id}", "html": ""},
            ]
        if type == "conversation.compacting":
            return [self.status("Summarising earlier messages…")]
        if type in ("conversation.compacted", "conversation.summary_reused"):
            return await self.summary_ops(
                payload.get("summary_id"), made=type == "conversation.compacted"
            )
        if type == "conversation.compaction_failed":
            html = self.render("left_out", note=left_out_note(payload))
            return [{"op": "append", "target": self.steps_id, "html": html}]
        if type == "account.connect_required":
            self.connect_asked = True
            html = self.render("connect_card", step=connect_step(payload))
            return [{"op": "append", "target": self.steps_id, "html": html}]
        if type == "approval.required":
            approvals = await self.pending_approvals(
                None if payload.get("via_child") else payload.get("call_id"),
                wait=not self.connect_asked,  # a connect step parks with no approval row
            )
            ops = [self.approval_op(a) for a in approvals]
            if self.connect_asked and not approvals:
                return [self.status("Waiting for you to connect your account…")]
            return [*ops, self.status("Waiting for approval…")]
        if type in TERMINAL_EVENTS:
            self.run = await stream_read(_fresh_run)(self.run)
            ops = []
            output = payload.get("output") or self.run.output
            if not self.has_text and output:
                ops.append(
                    {
                        "op": "replace",
                        "target": f"run-{self.run.pk}-answer",
                        "html": self.render(
                            "answer", turn=Turn(run=self.run, user_text="", answer=output)
                        ),
                    }
                )
            # Decided approvals (by someone else, elsewhere) show their outcome.
            for approval in await stream_read(_approvals)(self.run):
                ops.append(self.approval_op(approval))
            ops.append(self.citations())
            following, started_from, queued = await stream_read(_after_end)(self.run)
            late = started_from is not None and started_from.late
            note = "Your steering message came after the agent's last step: it is the next turn."
            ops.append(self.status(note if late else ""))
            ops.append(await self.footer(is_last=following is None))
            if queued is not None:
                html = self.render("queued_list", queued=queued, conversation=self.conversation)
                ops.append({"op": "replace", "target": "queued", "html": html})
            if following is not None:
                turn = Turn(run=following, user_text=following.input, is_last=True, follow=True)
                html = self.render("turn", turn=turn, conversation=self.conversation)
                target = f"turn-{following.pk}"
                ops.append({"op": "replace", "target": target, "html": html, "parent": "thread"})
            return ops
        return []

    async def summary_ops(self, summary_id: Any, *, made: bool) -> list[dict[str, Any]]:
        """ "Earlier messages summarised", where the reloaded page has it: before the turn
        after the last message it covers (thread._place_summaries; chat.js's `place` op
        finds that turn from the message's element). A reused summary is usually on the page
        already: then it is replaced, as a resumed stream replaces it too."""
        if not isinstance(summary_id, int):
            return []
        summary = await stream_read(_summary)(self.run, summary_id)
        if summary is None:
            return []
        place = {
            "op": "place",
            "target": f"summary-{summary.pk}",
            "html": self.render("compacted", summary=summary),
            "after": f"message-{summary.last_message_id}",
        }
        return [place, self.status("Earlier messages summarised.")] if made else [place]

    def tool_op(self, card: ToolCard, program: ToolCard | None = None) -> dict[str, Any]:
        """The card replaced, or added to the steps (or to its program's list of calls)."""
        html = self.render("tool_card", step=card)
        target = f"tool-{self.run.pk}-{dom_key(card.call_id)}"
        parent = f"tool-{self.run.pk}-{program.key}-calls" if program else self.steps_id
        return {"op": "replace", "target": target, "html": html, "parent": parent}

    def member_op(self, step: MemberStep) -> dict[str, Any]:
        return {
            "op": "replace",
            "target": f"member-{self.run.pk}-{step.key}",
            "html": self.render("member_card", step=step),
            "parent": self.steps_id,
        }

    def approval_op(self, approval: Approval) -> dict[str, Any]:
        self.approvals_shown.add(approval.pk)
        html = self.render("approval_card", approval=approval)
        return {
            "op": "replace",
            "target": f"approval-{approval.pk}",
            "html": html,
            "parent": self.steps_id,
        }

    def citations(self) -> dict[str, Any]:
        turn = Turn(run=self.run, user_text="", steps=list(self.cards))
        html = self.render("citations", turn=turn)
        return {"op": "replace", "target": f"run-{self.run.pk}-citations", "html": html}

    def status(self, text: str) -> dict[str, Any]:
        return {
            "op": "replace",
            "target": f"run-{self.run.pk}-state",
            "html": self.render("run_state", text=text),
        }

    @property
    def conversation(self) -> dict[str, int]:
        return {"pk": self.context["conversation_id"]}  # (what the partials read of it)

    async def footer(self, *, is_last: bool = True) -> dict[str, Any]:
        with_verdict(self.principal, self.run)  # (verifications prefetched: _fresh_run)
        turn = Turn(run=self.run, user_text="", is_last=is_last)
        if is_last and self.run.status == RunStatus.FAILED:  # Resume, for who may
            turn.may_resume = await stream_read(may_resume)(self.principal, self.run)
        html = self.render("run_footer", turn=turn)
        return {"op": "replace", "target": f"run-{self.run.pk}-footer", "html": html}

    async def pending_approvals(
        self, call_id: str | None = None, *, wait: bool = True
    ) -> list[Approval]:
        """The run's (and its children's) pending approvals not yet shown. The rows commit
        with the run's parking, before its `approval.required` events go out
        (agents.runs.writer), so the first read finds them; should one be missing, wait for
        it, briefly — but not for `call_id`'s once its row is there (shown with an earlier
        event of the park)."""
        deadline = asyncio.get_running_loop().time() + (APPROVAL_WAIT_S if wait else 0)
        while True:
            approvals = await stream_read(_approvals)(self.run)
            pending = [
                a for a in approvals
                if a.status == ApprovalStatus.PENDING and a.pk not in self.approvals_shown
            ]  # fmt: skip
            arrived = call_id is not None and any(
                a.run_id == self.run.pk and a.call_id == call_id for a in approvals
            )
            if pending or arrived or asyncio.get_running_loop().time() >= deadline:
                return pending
            await asyncio.sleep(0.1)


def _resume_point(run_id: int, after_seq: int) -> tuple[int, bool, list[ToolCard]]:
    """Where a stream resuming after `after_seq` stands: the round being streamed, whether
    any text was shown, the tool cards already on the page."""
    from agentplatform.web.chat.thread import fold

    if after_seq <= 0:
        return 0, False, []
    steps: list = []
    for event in selectors.run_events_through(run_id=run_id, seq=after_seq):
        fold(steps, event.type, event.payload)
    rounds = [s.round for s in steps if isinstance(s, TextSegment)]
    has_text = any(isinstance(s, TextSegment) and s.text for s in steps)
    return (rounds[-1] if rounds else 0), has_text, [s for s in steps if isinstance(s, ToolCard)]


def _fresh_run(run: Run) -> Run:
    return selectors.run_streamed(tenant_id=run.tenant_id, run_id=run.pk)


def _after_end(run: Run):
    """The turn started when `run` ended (and the queued message it answers), and the
    conversation's queued messages now; (None, None, None) outside a conversation."""
    if run.conversation_id is None or run.parent_id is not None:
        return None, None, None
    following, started_from = turn_after(run)
    return (
        following,
        started_from,
        queued_messages(tenant=run.tenant, conversation=run.conversation),
    )


def _summary(run: Run, summary_id: int) -> ConversationSummary | None:
    if run.conversation_id is None:
        return None
    return selectors.conversation_summary_shown(
        tenant_id=run.tenant_id, conversation_id=run.conversation_id, summary_id=summary_id
    )


def _approvals(run: Run) -> list[Approval]:
    return approvals_for([run])
