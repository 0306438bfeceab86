"""A conversation's branches: its messages form a tree (`Message.parent`), and what it shows
and continues is the branch from its first message to its `leaf`. Editing a message adds a
sibling of it and answering again a sibling of the answer (agents.runs: run_edit,
run_regenerate), so every earlier version stays reachable; a person switches between them,
or forks a branch into a conversation of its own (fork.py).

A child always has a greater id than its parent (it was written after it; a fork copies in
order), so a branch is its messages ordered by id, and the newest message under a message
is a leaf.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet
from django.db.models.expressions import RawSQL
from django.http import Http404

from agents.models import Conversation, Message, Run

_TABLE = Message._meta.db_table
# The ids from `tip` up to its first message, at most `depth` of them: each step an index
# lookup by primary key.
_UP = (
    f"WITH RECURSIVE up(id, parent_id, depth) AS ("  # noqa: S608 (our table)
    f"SELECT id, parent_id, 1 FROM {_TABLE} WHERE id = %s "
    f"UNION ALL SELECT m.id, m.parent_id, up.depth + 1 FROM {_TABLE} m "
    "JOIN up ON m.id = up.parent_id WHERE up.depth < %s) SELECT id FROM up"
)
# The ids under `root` (itself included).
_DOWN = (
    f"WITH RECURSIVE down(id) AS (SELECT id FROM {_TABLE} WHERE id = %s "  # noqa: S608
    f"UNION ALL SELECT m.id FROM {_TABLE} m JOIN down ON m.parent_id = down.id) "
    "SELECT id FROM down"
)
WHOLE = 1_000_000  # no branch is deeper


def branch(tip_id: int, *, depth: int = WHOLE) -> QuerySet[Message]:
    """The messages from the first to `tip_id` (its `depth` newest only), as a queryset to
    order and narrow: one query when read."""
    return Message.objects.filter(pk__in=RawSQL(_UP, [tip_id, depth]))  # noqa: S611 (our SQL, bound ids)


def newest_under(message_id: int) -> int:
    """The newest message under `message_id` (itself when it has none): the tip of the
    branch last written through it. One query."""
    tip = (
        Message.objects.filter(pk__in=RawSQL(_DOWN, [message_id]))  # noqa: S611 (our SQL)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    return tip or message_id


def conversation_message(*, conversation: Conversation, message_id: object) -> Message:
    """One of the conversation's messages; 404 for any other id."""
    try:
        pk = int(message_id)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        pk = -1
    message = Message.objects.filter(conversation=conversation, pk=pk).first()
    if message is None:
        raise Http404("No such message in this conversation.")
    return message


@dataclass(frozen=True)
class Switch:
    """A message's place among its versions (the messages that follow the same message):
    shown as "< 2/3 >" with the versions before and after it."""

    position: int  # 1-based
    count: int
    previous_id: int | None
    next_id: int | None


@dataclass
class Shown:
    """A branch as the chat shows it: its messages in order, the runs that answered its
    user messages, and where a message has other versions, its Switch."""

    messages: list[Message]
    switches: dict[int, Switch]
    runs: dict[int, list[Run]]  # user message id -> the runs that answered it, oldest first
    tip_id: int | None
    current: bool  # is this the branch the conversation continues (its leaf's)?


def branch_shown(*, conversation: Conversation, through: Message | None = None) -> Shown:
    """The conversation's current branch, or the branch through `through` when that is not
    on it (to the newest message under it). Five queries (none with no message; one or two
    more with `through`): the branch with its runs' agents and crews, their verifications,
    the versions, the runs answering it and theirs."""
    tip_id = conversation.leaf_id
    if through is not None and not (
        tip_id is not None and branch(tip_id).filter(pk=through.pk).exists()
    ):  # not on the current branch: the newest one through it
        tip_id = newest_under(through.pk)
    if tip_id is None:
        return Shown([], {}, {}, None, True)
    shown = branch(tip_id).select_related("run__agent", "run__crew")
    messages = list(shown.prefetch_related("run__verifications").order_by("id"))
    parents = {m.parent_id for m in messages if m.parent_id is not None}
    versions: dict[int | None, list[int]] = {}
    siblings = Message.objects.filter(conversation=conversation, parent_id__in=parents)
    roots = Message.objects.filter(conversation=conversation, parent__isnull=True)
    for parent_id, pk in (siblings | roots).order_by("id").values_list("parent_id", "id"):
        versions.setdefault(parent_id, []).append(pk)
    switches: dict[int, Switch] = {}
    for message in messages:
        ids = versions.get(message.parent_id, [])
        if len(ids) > 1 and message.pk in ids:
            at = ids.index(message.pk)
            switches[message.pk] = Switch(
                position=at + 1,
                count=len(ids),
                previous_id=ids[at - 1] if at > 0 else None,
                next_id=ids[at + 1] if at + 1 < len(ids) else None,
            )
    asked = [m.pk for m in messages if m.role == Message.Role.USER]
    answering = Run.objects.filter(in_reply_to_id__in=asked, parent=None).order_by("id")
    runs: dict[int, list[Run]] = {}
    for run in answering.select_related("agent", "crew").prefetch_related("verifications"):
        runs.setdefault(run.in_reply_to_id, []).append(run)
    return Shown(messages, switches, runs, tip_id, tip_id == conversation.leaf_id)


def branch_switch(*, conversation: Conversation, message: Message) -> Conversation:
    """Show (and continue) the branch through `message`: the conversation's leaf becomes
    the newest message under it. An answer still running on the branch left behind lands
    there, and the conversation stays where it was switched to."""
    if message.conversation_id != conversation.pk:
        raise Http404("No such message in this conversation.")
    conversation.leaf_id = newest_under(message.pk)
    conversation.save(update_fields=["leaf", "updated_at"])
    return conversation


def branch_versions(*, conversation: Conversation) -> list[Message]:
    """Every branch of the conversation as its tip (a message nothing follows), oldest
    first; `current` says which one it shows and continues. One query."""
    tips = list(
        Message.objects.filter(conversation=conversation, children__isnull=True).order_by("id")
    )
    for tip in tips:
        tip.current = tip.pk == conversation.leaf_id
    return tips


def branch_messages(*, conversation: Conversation, tip_id: object) -> QuerySet[Message]:
    """The branch of the conversation from its first message to `tip_id`, oldest first (404
    for a message of no branch of it). One query, and one when read."""
    tip = conversation_message(conversation=conversation, message_id=tip_id)
    return branch(tip.pk).filter(conversation=conversation).order_by("id")
