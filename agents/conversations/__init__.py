"""A conversation: its turns as a new run reads them, its branches, searching it, and the
files attached in it. Everything outside this package imports from here, never from a
module inside (an import-linter contract says so).

    history.py             conversation_history, conversation_frame: what a new run of a
                           conversation starts from (the branch it answers)
    branches.py            the messages' tree: a branch, the one shown with its versions'
                           switches, switching
    fork.py                conversation_fork: a branch copied into a new conversation,
                           its messages' attachments too (their files copied)
    search.py              message_search: full text over one owner's messages, highlighted
    attachments.py         files attached in a conversation: upload (limits, storage),
                           reads, sending with a message, deletion (stored files too)
    attachment_types.py    what a file is, from its bytes; the name shown
    document_reading.py    the reader and embedder of documents a plug-in registers (rag's)
    attachment_reading.py  a document read: in its upload (small) or by a worker (large,
                           `reading` -> `ready` | `failed`), the stale ones' sweep, a run's
                           bounded wait for them
    attachment_context.py  what a run is given of them: images, documents in its context,
                           `attachment_search` over the long ones
    compaction.py          run_history, compacted_history: a long conversation's older
                           turns summarised by a model (stored, reused, made anew
                           incrementally)
"""

from agents.conversations.attachment_context import (
    SEARCH_TOOL,
    RunAttachments,
    attachment_search_tool,
    run_attachments,
)
from agents.conversations.attachment_reading import (
    attachment_read,
    attachment_readings_stale,
    attachments_read_wait,
)
from agents.conversations.attachment_types import ACCEPTED, download_name, shown_name
from agents.conversations.attachments import (
    attachment_bytes,
    attachment_delete,
    attachment_of,
    attachment_upload,
    attachments_for_send,
    attachments_given,
    attachments_of,
    attachments_pending,
    attachments_send,
    attachments_sent_in,
    message_attachments,
    run_attachment_list,
    run_message_attachments,
)
from agents.conversations.branches import (
    Shown,
    Switch,
    branch,
    branch_messages,
    branch_shown,
    branch_switch,
    branch_versions,
    conversation_message,
    newest_under,
)
from agents.conversations.compaction import (
    CompactionSettings,
    History,
    compacted_history,
    run_history,
    threshold_of,
)
from agents.conversations.document_reading import (
    DocumentReading,
    DocumentUnreadable,
    Passage,
    ReadDocument,
    register_document_reading,
)
from agents.conversations.fork import conversation_fork
from agents.conversations.history import conversation_frame, conversation_history
from agents.conversations.search import Hit, message_search

__all__ = [
    "ACCEPTED",
    "SEARCH_TOOL",
    "CompactionSettings",
    "DocumentReading",
    "DocumentUnreadable",
    "History",
    "Hit",
    "Passage",
    "ReadDocument",
    "RunAttachments",
    "Shown",
    "Switch",
    "attachment_bytes",
    "attachment_delete",
    "attachment_of",
    "attachment_read",
    "attachment_readings_stale",
    "attachment_search_tool",
    "attachment_upload",
    "attachments_for_send",
    "attachments_given",
    "attachments_of",
    "attachments_pending",
    "attachments_read_wait",
    "attachments_send",
    "attachments_sent_in",
    "branch",
    "branch_messages",
    "branch_shown",
    "branch_switch",
    "branch_versions",
    "compacted_history",
    "conversation_fork",
    "conversation_frame",
    "conversation_history",
    "conversation_message",
    "download_name",
    "message_attachments",
    "message_search",
    "newest_under",
    "register_document_reading",
    "run_attachment_list",
    "run_attachments",
    "run_history",
    "run_message_attachments",
    "shown_name",
    "threshold_of",
]
