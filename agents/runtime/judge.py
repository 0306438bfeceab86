"""A judge model's verdict on an answer, against a rubric (an evaluation case expecting
`{"judge": "<rubric>"}`). Pure: the adapter and the model are passed in (agents.judging
picks the tenant's connection). One model call; its usage comes back with the verdict, or
with the error when the judge answered in another form — a judge's garbage is a clear
JudgeAnswerError, never a guessed verdict and never a crash.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from providers.runtime.adapter import ModelAdapter
from providers.runtime.types import ModelRequest, Usage, UserMessage

MAX_REASON = 2000
MAX_ANSWER = 20_000  # of the agent's answer, shown to the judge
MAX_TOKENS = 400  # of the judge's reply

SYSTEM = (
    "You are an impartial judge of an AI agent's answer. You are given the user's input, "
    "the agent's answer and a rubric. Decide whether the answer meets the rubric. Reply "
    'with one JSON object and nothing else: {"pass": true or false, "reason": "one or two '
    'sentences"}.'
)


class JudgeAnswerError(Exception):
    """The judge did not answer in the expected form (its usage is still counted)."""

    def __init__(self, message: str, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or Usage()


@dataclass(frozen=True)
class JudgeVerdict:
    passed: bool
    reason: str
    usage: Usage = field(default_factory=Usage)
    model: str = ""


def judge_prompt(*, rubric: str, input: str, answer: str) -> str:
    shown = answer if len(answer) <= MAX_ANSWER else answer[:MAX_ANSWER] + "…"
    return (
        f"<rubric>\n{rubric}\n</rubric>\n\n<input>\n{input}\n</input>\n\n"
        f"<answer>\n{shown}\n</answer>\n\nDoes the answer meet the rubric? Reply with the "
        'JSON object only: {"pass": true|false, "reason": "..."}'
    )


async def judge(
    adapter: ModelAdapter, *, model: str, rubric: str, input: str, answer: str
) -> JudgeVerdict:
    """Ask the judge. Provider errors (ProviderError) propagate: the caller says the judge
    could not be asked; an answer of another form raises JudgeAnswerError."""
    request = ModelRequest(
        model=model,
        system=SYSTEM,
        messages=[UserMessage(judge_prompt(rubric=rubric, input=input, answer=answer))],
        temperature=0,
        max_tokens=MAX_TOKENS,
    )
    response = await adapter.complete(request)
    try:
        passed, reason = parse_verdict(response.text)
    except JudgeAnswerError as exc:
        raise JudgeAnswerError(str(exc), response.usage) from None
    return JudgeVerdict(passed, reason, response.usage, response.model or model)


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_VERDICT_WORDS = {"pass": True, "passed": True, "fail": False, "failed": False}


def parse_verdict(text: str) -> tuple[bool, str]:
    """(passed, reason) from the judge's reply: a JSON object with a boolean `pass` (or
    `passed`, or `verdict` "pass"/"fail"), possibly in a code fence or beside other words.
    JudgeAnswerError otherwise."""
    for candidate in _objects(text or ""):
        verdict = _verdict(candidate)
        if verdict is not None:
            reason = candidate.get("reason", "")
            reason = reason if isinstance(reason, str) else json.dumps(reason)
            return verdict, reason[:MAX_REASON]
    shown = (text or "").strip()
    shown = shown if len(shown) <= 200 else shown[:200] + "…"
    raise JudgeAnswerError(
        'the judge did not answer in the expected form ({"pass": true|false, "reason": '
        f'"..."}}); it said: {shown!r}'
    )


def _objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects in `text`: the whole of it (fences stripped), else each `{...}`
    found in it."""
    stripped = _FENCE.sub("", text.strip())
    found: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    try:
        whole = json.loads(stripped)
        if isinstance(whole, dict):
            return [whole]
    except ValueError:
        pass
    index = stripped.find("{")
    while index != -1 and len(found) < 10:
        try:
            value, end = decoder.raw_decode(stripped, index)
        except ValueError:
            index = stripped.find("{", index + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        index = stripped.find("{", end)
    return found


def _verdict(candidate: dict[str, Any]) -> bool | None:
    for key in ("pass", "passed"):
        if isinstance(candidate.get(key), bool):
            return candidate[key]
    word = candidate.get("verdict")
    if isinstance(word, str):
        return _VERDICT_WORDS.get(word.strip().lower())
    return None
