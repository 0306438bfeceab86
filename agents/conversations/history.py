"""What a new run of a conversation starts from: the earlier turns of the branch it answers
(agents/conversations/branches.py) and the frame of the latest run on that branch."""

from __future__ import annotations

from django.conf import settings

from agents.conversations.branches import branch
from agents.models import Message, Run
from providers.runtime.types import AssistantMessage, UserMessage
from tools.runtime.frames import Frame

MAX_TURNS = 200  # the newest messages a run's history is read from
CHARS_PER_TOKEN = 4  # the estimate used for history budgets

Row = tuple[int, str, str]  # a message: id, role, content
STEERED = "\n\n(While you worked on this, the user added: {text})"


def conversation_frame(run: Run) -> Frame | None:
    """The frame (tool results others take inputs from, reference tokens) of the latest run
    that wrote an answer on the run's branch and has one: where a new run of it starts. One
    query, reading only that part of the runs' state."""
    if run.in_reply_to_id is None:
        return None
    answers = branch(run.in_reply_to_id, depth=MAX_TURNS).filter(role=Message.Role.ASSISTANT)
    data = (
        Run.objects.filter(pk__in=answers.values("run_id"), state__has_key="frame")
        .order_by("-id")
        .values_list("state__frame", flat=True)
        .first()
    )
    return Frame.from_dict(data) if data else None


def history_rows(run: Run, limit: int = MAX_TURNS) -> list[Row]:
    """The messages before the one the run answers, on its branch only, newest first, at
    most `limit`. What the person said to a run while it worked (its answer's `steers`)
    joins the question it answered: at its place, and in the user's turn, so turns still
    alternate as providers want. One query."""
    if run.in_reply_to_id is None:
        return []
    rows = (
        branch(run.in_reply_to_id, depth=limit + 1)
        .exclude(pk=run.in_reply_to_id)
        .order_by("-id")
        .values_list("id", "role", "content", "steers")
    )
    kept: list[Row] = []
    steered: list[str] = []  # the steers of the answer just read: its question is next
    for pk, role, content, steers in rows:
        if role == "user" and steered:
            content += "".join(STEERED.format(text=text) for text in steered)
        steered = steers if role == "assistant" else []
        kept.append((pk, role, content))
    return kept


def turns_within(rows: list[Row], budget_chars: int) -> list[UserMessage | AssistantMessage]:
    """`rows` (newest first) as turns, oldest first: the newest that fit in `budget_chars`,
    beginning with a user turn (providers want one first)."""
    kept: list[UserMessage | AssistantMessage] = []
    for _, role, content in rows:
        budget_chars -= len(content)
        if budget_chars < 0:
            break
        kept.append(as_turn(role, content))
    kept.reverse()
    while kept and not isinstance(kept[0], UserMessage):
        kept.pop(0)
    return kept


def as_turn(role: str, content: str) -> UserMessage | AssistantMessage:
    return UserMessage(content) if role == "user" else AssistantMessage(text=content)


def conversation_history(run: Run) -> list[UserMessage | AssistantMessage]:
    """The turns before the message the run answers, on its branch only, newest kept first
    within the token budget (HISTORY_TOKEN_BUDGET, estimated at 4 characters a token), older
    ones left out (runs summarise them instead: compaction.run_history). One query."""
    budget = getattr(settings, "HISTORY_TOKEN_BUDGET", 8000) * CHARS_PER_TOKEN
    return turns_within(history_rows(run), budget)
