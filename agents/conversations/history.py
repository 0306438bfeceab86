"""What a new run of a conversation starts from: the earlier turns of the branch it answers
(agents/conversations/branches.py) and the frame of the latest run on that branch."""

from __future__ import annotations

from django.conf import settings

from agents.conversations.branches import branch
from agents.models import Message, Run
from providers.runtime.types import AssistantMessage, UserMessage
from tools.runtime.frames import Frame

MAX_TURNS = 200


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


def conversation_history(run: Run) -> list[UserMessage | AssistantMessage]:
    """The turns before the message the run answers, on its branch only, newest kept first
    within the token budget (HISTORY_TOKEN_BUDGET, estimated at 4 characters a token). One
    query."""
    if run.in_reply_to_id is None:
        return []
    budget = getattr(settings, "HISTORY_TOKEN_BUDGET", 8000) * 4
    rows = (
        branch(run.in_reply_to_id, depth=MAX_TURNS + 1)
        .exclude(pk=run.in_reply_to_id)
        .order_by("-id")
        .values_list("role", "content")
    )
    kept: list[UserMessage | AssistantMessage] = []
    for role, content in rows:
        budget -= len(content)
        if budget < 0:
            break
        kept.append(UserMessage(content) if role == "user" else AssistantMessage(text=content))
    kept.reverse()
    while kept and not isinstance(kept[0], UserMessage):  # providers want a user turn first
        kept.pop(0)
    return kept
