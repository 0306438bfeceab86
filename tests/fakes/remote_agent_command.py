"""A remote agent as a command (docs/remote-agents.md, "As a command"): JSON lines on
stdin/stdout. It keeps nothing between messages but what it puts in `state`, so any process
can answer any message of a run.

    python -m tests.fakes.remote_agent_command [calc|env|crash|garbage|slow|tool:<name>]

calc (default): asks for calculator("2+2"), then answers with the result it is given.
tool:<name>: asks for <name>({"id": 7}), then answers "done: <content>".
env: answers with the names of the environment variables it was given.
crash: exits with status 3 without answering. garbage: answers a line that is not JSON.
slow: sleeps 5 s before each answer.
"""

from __future__ import annotations

import json
import os
import sys
import time


def answer(message: dict, mode: str) -> dict:
    if message.get("type") == "health":
        return {"type": "health", "status": "ok"}
    if mode == "env":
        return {"type": "response", "text": ",".join(sorted(os.environ))}
    if message.get("type") == "query":
        if mode.startswith("tool:"):
            calls = [{"id": "t1", "name": mode[5:], "arguments": {"id": 7}}]
        else:
            calls = [{"id": "c1", "name": "calculator", "arguments": {"expression": "2+2"}}]
        return {"type": "tool_call", "calls": calls, "state": {"asked": calls[0]["name"]}}
    if message.get("type") == "tool_result":
        [result] = message["results"]
        asked = (message.get("state") or {}).get("asked")
        return {
            "type": "response",
            "text": f"{asked} said {result['content']}",
            "usage": {"input_tokens": 5, "output_tokens": 3},
        }
    return {"type": "error", "message": f"unexpected {message.get('type')!r}"}


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "calc"
    for line in sys.stdin:
        if mode == "crash":
            sys.exit(3)
        if mode == "slow":
            time.sleep(5)
        if mode == "garbage":
            print("this is not JSON", flush=True)
            continue
        print(json.dumps(answer(json.loads(line), mode)), flush=True)


if __name__ == "__main__":
    main()
