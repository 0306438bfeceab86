"""A conversation: its turns as a new run reads them, its branches, and searching it.
Everything outside this package imports from here, never from a module inside (an
import-linter contract says so).

    history.py   conversation_history, conversation_frame: what a new run of a
                 conversation starts from (the branch it answers)
    branches.py  the messages' tree: a branch, the one shown with its versions' switches,
                 switching, forking into a new conversation
    search.py    message_search: full text over one owner's messages, highlighted
"""

from agents.conversations.branches import (
    Shown,
    Switch,
    branch,
    branch_messages,
    branch_shown,
    branch_switch,
    branch_versions,
    conversation_fork,
    conversation_message,
    newest_under,
)
from agents.conversations.history import conversation_frame, conversation_history
from agents.conversations.search import Hit, message_search

__all__ = [
    "Hit",
    "Shown",
    "Switch",
    "branch",
    "branch_messages",
    "branch_shown",
    "branch_switch",
    "branch_versions",
    "conversation_fork",
    "conversation_frame",
    "conversation_history",
    "conversation_message",
    "message_search",
    "newest_under",
]
