"""simonw's `llm` command line (from the clients' venv, `make py-clients`) pointed at /v1 as
an OpenAI-compatible model: a system prompt, a continued conversation, tools it runs
itself (`--functions`) and `--schema`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.api.test_frameworks import PARIS, PYTHON
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

LLM = PYTHON.parent / "llm"
WEATHER = """
def get_weather(city: str) -> str:
    "The weather in a city."
    return f"sunny in {city}"
"""


@pytest.fixture
def llm(asgi_server, keys, celery_worker_process, agent, tmp_path: Path):
    if not LLM.exists():
        pytest.fail("the llm client is not installed: run `make py-clients`")
    (tmp_path / "extra-openai-models.yaml").write_text(
        "- model_id: platform\n"
        "  model_name: assistant\n"
        f"  api_base: {asgi_server}/v1\n"
        "  api_key_name: platform\n"
        "  supports_tools: true\n"
        "  supports_schema: true\n"
    )
    env = {"LLM_USER_PATH": str(tmp_path), "PATH": str(LLM.parent), "HOME": str(tmp_path)}
    subprocess.run([str(LLM), "keys", "set", "platform", "--value", keys["run"]], env=env,
                   check=True, capture_output=True)  # fmt: skip

    def run(*args: str) -> str:
        done = subprocess.run(
            [str(LLM), "-m", "platform", *args], env=env, capture_output=True, text=True,
            timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    return run


def sent(provider_server) -> list[dict]:
    return provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]


def test_a_system_prompt_and_a_continued_conversation(llm, provider_server):
    provider_server.script("openai", TextReply("Bonjour Ada."), TextReply("Tu es Ada."))
    assert llm("-s", "Answer in French.", "I am Ada.") == "Bonjour Ada."
    assert "Answer in French." in sent(provider_server)[0]["content"]
    assert llm("-c", "Who am I?") == "Tu es Ada."
    assert [(m["role"], m["content"]) for m in sent(provider_server)[1:]] == [
        ("user", "I am Ada."),
        ("assistant", "Bonjour Ada."),
        ("user", "Who am I?"),
    ]


def test_tools_it_runs_itself(llm, provider_server):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("w1", "get_weather", '{"city": "Paris"}')]),
        TextReply("It is sunny in Paris."),
    )
    assert llm("--functions", WEATHER, "Weather in Paris?") == "It is sunny in Paris."
    assert sent(provider_server)[-1]["content"] == "sunny in Paris"


def test_schema_gives_the_structured_answer(llm, provider_server):
    provider_server.script("openai", ToolCallReply([ToolCall("f1", "final_answer", PARIS)]))
    output = llm("--schema", "name, population int", "Biggest city of France?")
    assert json.loads(output) == json.loads(PARIS)
