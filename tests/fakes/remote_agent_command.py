"""A remote agent as a command (docs/remote-agents.md, "As a command"): JSON lines on
stdin/stdout. It keeps nothing between messages but what it puts in `state`, so any process
can answer any message of a run.

    python -m tests.fakes.remote_agent_command [calc|env|crash|garbage|slow|tool:<name>]
    python tests/fakes/remote_agent_command.py probe [<path>...]

calc (default): asks for calculator("2+2"), then answers with the result it is given.
tool:<name>: asks for <name>({"id": 7}), then answers "done: <content>".
env: answers with the names of the environment variables it was given.
crash: exits with status 3 without answering. garbage: answers a line that is not JSON.
slow: sleeps 5 s before each answer.
probe: answers with what it could find of the platform's: its uid, its environment, which of
the paths it is given and its parent's /proc environ it could read (JSON in the text); its
health is "ok" only if it could read none of them. It needs only the standard library, so
any Python 3 runs it, from any directory.
"""

from __future__ import annotations

import json
import os
import sys
import time


def probe(paths: list[str]) -> dict:
    readable = []
    for path in [*paths, f"/proc/{os.getppid()}/environ"]:
        try:
            with open(path, "rb") as handle:
                handle.read(1)
        except OSError:
            continue
        readable.append(path)
    return {"uid": os.getuid(), "env": dict(os.environ), "readable": readable}


def answer(message: dict, mode: str, paths: list[str]) -> dict:
    if message.get("type") == "health":
        readable = probe(paths)["readable"] if mode == "probe" else []
        return {"type": "health", "status": "read " + ",".join(readable) if readable else "ok"}
    if mode == "probe":
        return {"type": "response", "text": json.dumps(probe(paths))}
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
    paths = sys.argv[2:]
    for line in sys.stdin:
        if mode == "crash":
            sys.exit(3)
        if mode == "slow":
            time.sleep(5)
        if mode == "garbage":
            print("this is not JSON", flush=True)
            continue
        print(json.dumps(answer(json.loads(line), mode, paths)), flush=True)


if __name__ == "__main__":
    main()
