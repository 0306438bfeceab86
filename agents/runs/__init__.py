"""The Run: started, executed, recorded, followed, decided and cancelled. Everything outside
this package (the faces, the tasks, the admin, the other apps, the commands, the benchmarks)
imports from here, never from a module inside (an import-linter contract says so).

    start.py          run_start, run_regenerate, run_edit: who may start a run, with what
                      input, idempotency keys, one turn at a time per conversation
    new_chat.py       conversation_begin: a conversation, its files and its first turn,
                      all or nothing
    inline.py         run_inline: a run started and executed in the caller's process
    steering.py       message_queue, run_steer, queued_remove: a person's messages while an
                      answer works (the next turn, or steering the running loop)
    control.py        run_cancel, approval_decide: a person's say over a started run
    resume.py         run_resume: a failed run (an agent's, a crew's with its failed
                      members) continued from its last checkpoint, with its configuration
                      now (who may, which runs can)
    cancellation.py   the flag that stops an executing run, and its loop's check of it
    recorder.py       record_model_call, record_gateway_calls: model calls made outside a
                      run's loop, recorded as finished runs
    engine.py         execute_run: claim a run, build its agent or crew, run it, finalize it
    bridge.py         synchronous callers' runs, on the one event loop the process keeps
    claim.py          a run's lease taken and what it needs read, one statement
    writer.py         the run's record written: events, checkpoints, outcome, direct calls;
                      what may be stored (storable, storable_text)
    channels.py       the Redis publisher and a run's channel; which events end a stream
    subscriptions.py  the streams of a process share one Redis subscription
    reader.py         iter_run_events, follow_run: every face follows runs here
    worker.py         a process's event loop executing many runs (admit, drain, Nearby)
    sweeper.py        runs whose worker died, to be asked for again
    direct_calls.py   tool_run / atool_run: a tool called directly, as a one-call run (by a
                      person, a key, a self-test or a verifier)
    dry_calls.py      dry_call: an unsaved HTTP tool tried once, through the same step
    confirmation.py   an HTTP tool's exact request, prepared again from edited arguments
    costs.py          a run's own cost: its model's and its tools' model calls
    workflows.py      workflow_start, execute_workflow: a tenant's workflow as a durable run
                      (each step recorded as it completes; resumed without repeating one)
"""

from agents.runs.channels import TERMINAL_EVENTS, publisher
from agents.runs.claim import lease_seconds
from agents.runs.confirmation import request_text
from agents.runs.control import approval_decide, run_cancel, runs_wake_for_account
from agents.runs.direct_calls import (
    ToolRunOutcome,
    atool_run,
    atool_run_on_callers_thread,
    decide_at,
    tool_run,
)
from agents.runs.dry_calls import DryCallResult, dry_call
from agents.runs.engine import execute_run, execute_run_async
from agents.runs.inline import run_inline
from agents.runs.new_chat import conversation_begin
from agents.runs.reader import (
    HEARTBEAT,
    Ending,
    follow_run,
    heartbeat_seconds,
    iter_run_events,
    recorded_ending,
)
from agents.runs.recorder import GatewayCall, record_gateway_calls, record_model_call
from agents.runs.resume import RunNotResumable, may_resume, resumable_refusal, run_resume
from agents.runs.start import (
    BUSY,
    ConversationBusy,
    IdempotencyKeyReused,
    run_edit,
    run_regenerate,
    run_start,
)
from agents.runs.steering import (
    RunFinished,
    conversation_steer,
    message_queue,
    queued_messages,
    queued_remove,
    run_steer,
    turn_after,
)
from agents.runs.sweeper import stale_runs
from agents.runs.worker import Nearby, admit, drain, handing_over_at_shutdown
from agents.runs.workflows import (
    WORKFLOW_TOOL_PREFIX,
    compiled_workflow,
    workflow_start,
)
from agents.runs.writer import storable_text

__all__ = [
    "BUSY",
    "HEARTBEAT",
    "TERMINAL_EVENTS",
    "WORKFLOW_TOOL_PREFIX",
    "ConversationBusy",
    "DryCallResult",
    "Ending",
    "GatewayCall",
    "IdempotencyKeyReused",
    "Nearby",
    "RunFinished",
    "RunNotResumable",
    "ToolRunOutcome",
    "admit",
    "approval_decide",
    "atool_run",
    "atool_run_on_callers_thread",
    "compiled_workflow",
    "conversation_begin",
    "conversation_steer",
    "decide_at",
    "drain",
    "dry_call",
    "execute_run",
    "execute_run_async",
    "follow_run",
    "handing_over_at_shutdown",
    "heartbeat_seconds",
    "iter_run_events",
    "lease_seconds",
    "may_resume",
    "message_queue",
    "publisher",
    "queued_messages",
    "queued_remove",
    "record_gateway_calls",
    "record_model_call",
    "recorded_ending",
    "request_text",
    "resumable_refusal",
    "run_cancel",
    "run_edit",
    "run_inline",
    "run_regenerate",
    "run_resume",
    "run_start",
    "run_steer",
    "runs_wake_for_account",
    "stale_runs",
    "storable_text",
    "tool_run",
    "turn_after",
    "workflow_start",
]
