"""A conversation as the chat shows it: turns (the user's message and the run that answers
it), each with its steps folded from the run's stored events — text segments (one per model
round), tool cards, approval cards — so a reloaded page shows what a live stream showed and
the stream goes on from the last event (`Turn.last_seq`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from django.utils.safestring import SafeString

from agentplatform.web.templatetags.web import markdown_filter
from agents import conversations, selectors
from agents.conversations import Switch, branch_shown
from agents.models import (
    Approval,
    ApprovalStatus,
    Attachment,
    Conversation,
    ConversationSummary,
    Message,
    Run,
)
from agents.runs import request_text
from agents.runtime.code_mode import RUN_CODE
from agents.runtime.spec import TERMINAL, RunStatus


@dataclass
class TextSegment:
    """What the model said in one round: streamed text until the round completes, then the
    whole text (rendered as markdown)."""

    round: int
    text: str = ""
    complete: bool = False
    kind: str = "segment"

    @property
    def html(self) -> SafeString:
        return markdown_filter(self.text)


@dataclass
class ToolCard:
    call_id: str
    name: str
    arguments: Any = None
    result: Any = None
    error: str | None = None
    latency_ms: float | None = None
    done: bool = False
    kind: str = "tool"
    calls: list[ToolCard] = field(default_factory=list)  # a program's own calls (code mode)

    @property
    def key(self) -> str:
        return dom_key(self.call_id)

    @property
    def code(self) -> str | None:
        """The program of a `run_code` call (code mode), shown as code, not as JSON."""
        code = self.arguments.get("code") if isinstance(self.arguments, dict) else None
        return code if self.name == RUN_CODE and isinstance(code, str) else None

    @property
    def arguments_json(self) -> str:
        return pretty_json(self.arguments)

    @property
    def result_json(self) -> str:
        return pretty_json(self.result)


@dataclass
class MemberStep:
    """A crew member's part of the answer (sequential and parallel crews, and a combining
    manager): working, then how it ended and what it said. A manager's delegations are tool
    calls, shown as tool cards instead."""

    member_key: str  # the crew's key for the step, e.g. "seq:0:researcher"
    member: str
    status: str = ""  # "" while working, then the member run's final status
    output: str = ""
    error: str = ""
    kind: str = "member"

    @property
    def key(self) -> str:
        return dom_key(self.member_key)

    @property
    def output_html(self) -> SafeString:
        return markdown_filter(self.output)


def member_event(event_type: str, payload: dict[str, Any]) -> bool:
    """A crew member's start or end that gets a card of its own."""
    return event_type in {"crew.member.started", "crew.member.completed"} and not str(
        payload.get("key", "")
    ).startswith("delegate:")


def apply_member_event(
    step: MemberStep | None, event_type: str, payload: dict[str, Any]
) -> MemberStep:
    """The member's card after this event (`step`: the card so far, if any)."""
    if step is None:
        step = MemberStep(payload.get("key", ""), payload.get("member", ""))
    if event_type == "crew.member.completed":
        step.status = payload.get("status") or "failed"
        step.output = payload.get("output") or ""
        step.error = payload.get("error") or ""
    return step


@dataclass(frozen=True)
class Citation:
    """One source the answer drew on: a `knowledge_search` result of the run."""

    marker: str  # "[1]", as the model was given it
    document_id: int
    title: str
    snippet: str


def citations_of(steps: list) -> list[Citation]:
    """The knowledge_search results of a turn's completed tool calls, one per document
    chunk, in the order the model saw them."""
    found: list[Citation] = []
    for step in all_cards(steps):
        if not (isinstance(step, ToolCard) and step.name == "knowledge_search" and step.done):
            continue
        results = step.result.get("results") if isinstance(step.result, dict) else None
        for hit in results or ():
            if isinstance(hit, dict) and isinstance(hit.get("document_id"), int):
                text = " ".join(str(hit.get("text", "")).split())
                found.append(
                    Citation(
                        marker=str(hit.get("citation", "")),
                        document_id=hit["document_id"],
                        title=str(hit.get("document_title", "")),
                        snippet=text[:200] + ("…" if len(text) > 200 else ""),
                    )
                )
    return found


@dataclass
class SteerNote:
    """A steering message the person sent while the run worked, where its loop took it (a
    `run.steered` event: before the model call of round `round + 1`)."""

    id: int
    text: str
    kind: str = "steer"


@dataclass
class LeftOutNote:
    """The run's older messages could not be summarised (`conversation.compaction_failed`):
    it went on with the newest turns that fit, `count` messages left out. The event's error
    is the run record's, not the page's."""

    count: int
    kind: str = "left_out"


@dataclass
class ConnectStep:
    """A tool call that waits for the person to connect their own account at an MCP server
    (`account.connect_required`): a link to connect; the run goes on once they have."""

    connection: str
    connect_url: str
    message: str
    kind: str = "connect"


def connect_step(payload: dict[str, Any]) -> ConnectStep:
    url = str(payload.get("connect_url") or "")
    return ConnectStep(
        connection=str(payload.get("connection") or ""),
        connect_url=url if url.startswith("/") and not url.startswith("//") else "",
        message=str(payload.get("message") or ""),
    )


@dataclass
class ApprovalSlot:
    """Where a run parked for a human: the Approval rows found for it are shown here."""

    call_id: str
    approvals: list[Approval] = field(default_factory=list)
    kind: str = "approval"


@dataclass
class Turn:
    run: Run | None
    user_text: str
    steps: list[
        TextSegment | ToolCard | MemberStep | SteerNote | LeftOutNote | ConnectStep | ApprovalSlot
    ] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)  # those without a slot
    answer: str = ""  # the answer when no text segment holds it (crews, older turns)
    last_seq: int = 0
    is_last: bool = False
    # The branch's messages (agents.conversations.branches) and their other versions.
    user_message: Message | None = None
    user_switch: Switch | None = None
    answer_message: Message | None = None
    answer_switch: Switch | None = None
    attachments: list[Attachment] = field(default_factory=list)  # sent with the user's message
    # "Earlier messages summarised": the summaries whose last covered message came just
    # before this turn (agents/conversations/compaction.py)
    summaries: list[ConversationSummary] = field(default_factory=list)
    summarising: bool = False  # the run's last event: `conversation.compacting`
    may_resume: bool = False  # its run failed and the viewer may resume it (views.resumable)
    # Streamed from its first event even if its run is over: a turn the live stream adds
    # (started from the queue) may have finished before the stream that adds it ended.
    follow: bool = False

    @property
    def citations(self) -> list[Citation]:
        return citations_of(self.steps)

    @property
    def answer_html(self) -> SafeString:
        return markdown_filter(self.answer)

    @property
    def active(self) -> bool:
        return self.run is not None and self.run.status not in TERMINAL

    @property
    def has_text(self) -> bool:
        return any(isinstance(s, TextSegment) and s.text for s in self.steps)

    @property
    def current_round(self) -> int:
        rounds = [s.round for s in self.steps if isinstance(s, TextSegment)]
        return rounds[-1] if rounds else 0

    @property
    def waits_for_account(self) -> bool:
        """Parked on a call that needs the person's account, with no approval pending."""
        slots = [a for s in self.steps if isinstance(s, ApprovalSlot) for a in s.approvals]
        pending = [a for a in [*slots, *self.approvals] if a.status == ApprovalStatus.PENDING]
        return not pending and any(isinstance(s, ConnectStep) for s in self.steps)

    @property
    def state_text(self) -> str:
        """What an unfinished run is doing, as the page first shows it."""
        if self.run is None or not self.active:
            return ""
        if self.summarising:  # (as the stream says it: stream.RunStream.ops)
            return "Summarising earlier messages…"
        if self.run.status == RunStatus.AWAITING_APPROVAL and self.waits_for_account:
            return "Waiting for you to connect your account…"
        return {
            RunStatus.QUEUED: "Waiting for a worker…",
            RunStatus.AWAITING_APPROVAL: "Waiting for approval…",
        }.get(RunStatus(self.run.status), "Thinking…")

    @property
    def problem(self) -> str:
        return explain(self.run) if self.run is not None else ""


def pretty_json(value: Any) -> str:
    """For a <pre>: escaped by the template, never marked safe."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def dom_key(value: str) -> str:
    """A stable id fragment for a model-chosen call id (which may hold any characters)."""
    return hashlib.sha256(value.encode()).hexdigest()[:12]


def fold(steps: list, event_type: str, payload: dict[str, Any]) -> None:
    """Apply one stored event to a turn's steps (the page's view of the stream)."""
    if event_type == "inference.started":
        round, last = payload.get("round", 0), steps[-1] if steps else None
        # A round started again (a failed run resumed, a worker's retry): one segment for it.
        if not (isinstance(last, TextSegment) and last.round == round and not last.text):
            steps.append(TextSegment(round=round))
    elif event_type == "text.delta":
        segment = _last_segment(steps)
        if segment is None:
            steps.append(segment := TextSegment(round=0))
        segment.text += payload.get("text", "")
    elif event_type == "inference.completed":
        segment = _last_segment(steps)
        if segment is not None and not payload.get("error"):
            segment.text = payload.get("text") or ""
            segment.complete = True
    elif event_type == "tool.started":
        place_tool(steps, payload, started=True)
    elif event_type == "approval.required":
        steps.append(ApprovalSlot(payload.get("call_id", "")))
    elif event_type == "account.connect_required":
        steps.append(connect_step(payload))
    elif event_type == "run.resumed":  # a failed round said nothing: not shown
        while steps and isinstance(steps[-1], TextSegment) and not steps[-1].text:
            steps.pop()
    elif event_type == "run.steered":
        steps.append(SteerNote(payload.get("id", 0), str(payload.get("text", ""))))
    elif event_type == "conversation.compaction_failed":
        steps.append(left_out_note(payload))
    elif event_type == "tool.completed":
        card, _ = place_tool(steps, payload, started=False)
        complete_tool(card, payload)
    elif member_event(event_type, payload):
        key = payload.get("key", "")
        card = next((s for s in steps if isinstance(s, MemberStep) and s.member_key == key), None)
        step = apply_member_event(card, event_type, payload)
        if card is None:
            steps.append(step)


def left_out_note(payload: dict[str, Any]) -> LeftOutNote:
    count = payload.get("left_out_messages")
    return LeftOutNote(count if isinstance(count, int) and count > 0 else 0)


def complete_tool(card: ToolCard, payload: dict[str, Any]) -> None:
    card.result = payload.get("result")
    card.error = payload.get("error")
    card.latency_ms = payload.get("latency_ms")
    card.done = True


def place_tool(
    steps: list, payload: dict[str, Any], *, started: bool
) -> tuple[ToolCard, ToolCard | None]:
    """The card of a call's event, and the program card it is in (None: in `steps`): found,
    or added — a program's call (`<run_code call id>/<n>`) in its program's card, even one
    refused without starting. A call started again (a resumed run replaying it) keeps its
    card, emptied."""
    call_id = payload.get("call_id", "")
    head, slash, order = call_id.rpartition("/")
    program = tool_card(steps, head) if slash and order.isdigit() else None
    if program is not None and program.code is None:
        program = None
    card = tool_card(program.calls if program else steps, call_id)
    if card is None:
        card = ToolCard(call_id, payload.get("name", ""))
        (program.calls if program else steps).append(card)
    if started:
        card.arguments, card.result, card.error, card.latency_ms, card.done = (
            payload.get("arguments"), None, None, None, False,
        )  # fmt: skip
    return card, program


def all_cards(steps: list) -> list[ToolCard]:
    """The tool cards of `steps`, with the calls of programs after their program's card."""
    cards = []
    for step in steps:
        if isinstance(step, ToolCard):
            cards.append(step)
            cards.extend(step.calls)
    return cards


def tool_card(steps: list, call_id: str) -> ToolCard | None:
    return next((card for card in all_cards(steps) if card.call_id == call_id), None)


def _last_segment(steps: list) -> TextSegment | None:
    for step in reversed(steps):
        if isinstance(step, TextSegment):
            return step
    return None


def turns_for(conversation: Conversation, through: Message | None = None) -> list[Turn]:
    """The turns of the conversation's current branch (or of the branch through `through`),
    oldest first, each user message with the run that answered it there: the run of the
    answer that follows it, else the newest run answering it (still running, or stopped).
    Nine queries: the branch (agents.conversations.branch_shown: five), runs' events (text
    deltas only for unfinished runs), approvals, attachments, summaries of older turns."""
    shown = branch_shown(conversation=conversation, through=through)
    turns: list[Turn] = []
    by_run: dict[int, Turn] = {}
    messages = shown.messages
    for at, message in enumerate(messages):
        if message.role == Message.Role.USER:
            after = messages[at + 1] if at + 1 < len(messages) else None
            answered = after is not None and after.role == Message.Role.ASSISTANT
            answering = shown.runs.get(message.pk)
            if answered and after.run_id is not None:
                run = after.run
            else:
                run = answering[-1] if answering else message.run
            turn = Turn(
                run=run,
                user_text=message.content,
                user_message=message,
                user_switch=shown.switches.get(message.pk),
            )
            turns.append(turn)
            if run is not None:
                by_run.setdefault(run.pk, turn)
            continue
        previous = turns[-1] if turns else None
        if (
            previous is not None
            and previous.user_message is not None
            and (previous.user_message.pk == message.parent_id and previous.answer_message is None)
        ):
            turn = previous
        else:
            turn = Turn(run=None, user_text="")
            turns.append(turn)
        turn.answer, turn.answer_message = message.content, message
        turn.answer_switch = shown.switches.get(message.pk)
    runs = [t.run for t in turns if t.run is not None and by_run.get(t.run.pk) is t]
    finished = [r.pk for r in runs if r.status in TERMINAL]
    events = selectors.run_events_shown(run_ids=[r.pk for r in runs], finished_ids=finished)
    for event in events:
        turn = by_run[event.run_id]
        fold(turn.steps, event.type, event.payload)
        turn.last_seq = event.seq
        turn.summarising = event.type == "conversation.compacting"
    for approval in approvals_for(runs):
        turn = by_run[approval.run.parent_id or approval.run_id]
        slot = _slot_for(turn, approval)
        (slot.approvals if slot is not None else turn.approvals).append(approval)
    for turn in turns:
        if turn.has_text:
            turn.answer = ""  # the last segment holds it
        elif turn.run is not None and turn.run.status in TERMINAL and not turn.answer:
            turn.answer = turn.run.output
    attached = conversations.message_attachments(m for m in messages if m.role == "user")
    for turn in turns:
        if turn.user_message is not None:
            turn.attachments = attached.get(turn.user_message.pk, [])
    if turns:
        turns[-1].is_last = True
    _place_summaries(turns, conversation)
    return turns


def _place_summaries(turns: list[Turn], conversation: Conversation) -> None:
    """Each summary goes before the turn after the last message it covers (a summary of
    messages not on the branch shown is not shown). One query."""
    at: dict[int, int] = {}  # message id -> the index of its turn
    for index, turn in enumerate(turns):
        for message in (turn.user_message, turn.answer_message):
            if message is not None:
                at[message.pk] = index
    for summary in selectors.conversation_summaries_shown(conversation=conversation):
        index = at.get(summary.last_message_id)
        if index is not None:
            turns[min(index + 1, len(turns) - 1)].summaries.append(summary)


def _slot_for(turn: Turn, approval: Approval) -> ApprovalSlot | None:
    """The slot of the approval's own call; a child run's approval (a crew member waits)
    goes to the latest slot."""
    slots = [s for s in turn.steps if isinstance(s, ApprovalSlot)]
    if approval.run_id == turn.run.pk:
        return next((s for s in slots if s.call_id == approval.call_id), None)
    return slots[-1] if slots else None


def approvals_for(runs: list[Run]) -> list[Approval]:
    """The approvals of these runs and of their child runs (a crew's members), oldest first."""
    return [for_display(a) for a in selectors.runs_approvals(run_ids=[r.pk for r in runs])]


def for_display(approval: Approval) -> Approval:
    """Gives the approval card its arguments as JSON text (the edited ones once decided),
    the arguments to edit, and the exact request approving sends (an HTTP tool's)."""
    shown = (
        approval.edited_arguments if approval.edited_arguments is not None else approval.arguments
    )
    approval.arguments_json = pretty_json(shown)
    approval.editable_json = pretty_json(approval.arguments)
    approval.request_text = request_text(approval.prepared_request)
    return approval


def explain(run: Run) -> str:
    """What went wrong, in words, with who can do what about it; "" when nothing did."""
    error = run.error or ""
    if run.status == RunStatus.MAX_ROUNDS:
        return (
            f"The agent stopped after {run.agent.max_rounds if run.agent else 'its'} rounds "
            "without a final answer. Ask a narrower question, or ask an admin to raise the "
            "agent's round limit."
        )
    if run.status == RunStatus.CANCELLED:
        return "Stopped: what it produced so far is kept. Regenerate to ask again."
    if run.status != RunStatus.FAILED:
        return ""
    if error.startswith(("ProviderUnavailable", "Timeout", "RateLimited")):
        return (
            "The model provider is unavailable right now. Wait a moment, then resume the answer "
            "where it stopped or regenerate it; if it keeps failing, ask an admin to check the "
            "provider connection."
        )
    misconfigured = ("AuthenticationFailed", "AddressRefused", "ModelNotFound", "BadRequest")
    if error.startswith(misconfigured) or "provider connection" in error:
        return (
            f"The provider connection is misconfigured ({error}). "
            "Ask an admin of this workspace to fix it, then resume the answer."
        )
    if error.startswith("rejected by"):
        return (
            f"The request was rejected ({error}). "
            "Change what you ask, or ask someone to approve it."
        )
    return (
        f"The answer failed: {error or 'unknown error'}. Resume or regenerate it to try again; "
        f"if it keeps failing, tell an admin (run {run.pk})."
    )
