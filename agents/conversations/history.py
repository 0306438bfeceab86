"""What a new run of a conversation starts from: its earlier turns and the frame of its
latest earlier run."""

from __future__ import annotations

from django.conf import settings

from agents.models import Message, Run
from providers.runtime.types import AssistantMessage, UserMessage
from tools.runtime.frames import Frame


def conversation_frame(run: Run) -> Frame | None:
    """The frame (tool results others take inputs from, reference tokens) of the
    conversation's latest earlier run that has one: where a new run of it starts. One
    query, reading only that part of the runs' state."""
    if run.conversation_id is None:
        return None
    data = (
        Run.objects.filter(
            conversation_id=run.conversation_id, pk__lt=run.pk, state__has_key="frame"
        )
        .order_by("-id")
        .values_list("state__frame", flat=True)
        .first()
    )
    return Frame.from_dict(data) if data else None


def conversation_history(run: Run) -> list[UserMessage | AssistantMessage]:
    """Earlier turns of the run's conversation, newest kept first within the token budget
    (HISTORY_TOKEN_BUDGET, estimated at 4 characters a token). One query."""
    if run.conversation_id is None:
        return []
    budget = getattr(settings, "HISTORY_TOKEN_BUDGET", 8000) * 4
    rows = (
        Message.objects.filter(conversation_id=run.conversation_id)
        .exclude(run_id=run.pk)
        .order_by("-id")
        .values_list("role", "content")[:200]
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
