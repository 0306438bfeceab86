"""A conversation: its turns as a new run reads them. Everything outside this package
imports from here, never from a module inside (an import-linter contract says so).

    history.py   conversation_history, conversation_frame: what a new run of a
                 conversation starts from
"""

from agents.conversations.history import conversation_frame, conversation_history

__all__ = ["conversation_frame", "conversation_history"]
