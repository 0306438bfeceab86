"""The deployment shape as written down (Dockerfile, docker-compose.yml, docs/operations.md's
"Scaling out" commands and its "Deployment shape" table) is the one that works, and the four
agree: web with lifespan on
and a bounded graceful shutdown, run and batch workers on their queues with distinct node
names, exactly one beat. Text checks only: no Docker engine here."""

from __future__ import annotations

import json
import re
import shlex

import yaml

from tests.conftest import ROOT

WORKER_FLAGS = ("--without-gossip", "--without-mingle", "--without-heartbeat")
QUEUES = {"run": "runs,housekeeping", "batch": "batch"}


def option(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


def from_app(command: list[str]) -> list[str]:
    """The arguments after `agentplatform.asgi:application` (whatever launches uvicorn)."""
    return command[command.index("agentplatform.asgi:application") :]


def celery_role(command: list[str]) -> str | None:
    """'beat', 'run' or 'batch' for a celery command (by its queues), else None."""
    if "celery" not in command:
        return None
    if "beat" in command:
        return "beat"
    queues = option(command, "-Q")
    return next((role for role, names in QUEUES.items() if names == queues), f"?{queues}")


def compose_services() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def operations_text() -> str:
    return (ROOT / "docs" / "operations.md").read_text()


def scaling_out_commands() -> list[list[str]]:
    """The commands of docs/operations.md, "Scaling out"."""
    text = operations_text()
    section = text[text.index("## Scaling out") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line) for line in block.splitlines() if line and not line.startswith("#")]


def check_web(command: list[str]) -> None:
    assert option(command, "--lifespan") == "on", command
    assert float(option(command, "--timeout-graceful-shutdown")) > 0, command


def check_workers_and_beat(commands: list[list[str]]) -> None:
    roles = [celery_role(c) for c in commands if celery_role(c)]
    assert sorted(roles) == ["batch", "beat", "run"], roles  # one of each, beat exactly once
    workers = [c for c in commands if celery_role(c) in ("run", "batch")]
    names = [option(c, "-n") for c in workers]
    assert all(name and name.endswith("@%h") for name in names), names
    assert len(set(names)) == len(names), names
    for command in workers:
        assert set(WORKER_FLAGS) <= set(command), command


def dockerfile_command() -> list[str]:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    return json.loads(next(line for line in lines if line.startswith("CMD")).removeprefix("CMD"))


def essentials(command: list[str]) -> set[str]:
    """A celery command's arguments but its node name and log level."""
    return set(command[command.index("celery") :]) - {option(command, "-n"), "--loglevel", "INFO"}


def test_the_image_starts_the_web_process_with_lifespan_on():
    check_web(dockerfile_command())


def test_compose_runs_web_run_and_batch_workers_and_one_beat():
    services = compose_services()
    check_web(services["web"]["command"])
    commands = [service.get("command") or [] for service in services.values()]
    check_workers_and_beat(commands)
    beat = next(s for s in services.values() if celery_role(s.get("command") or []) == "beat")
    assert beat.get("deploy", {}).get("replicas", 1) == 1


def test_the_scaling_out_commands_are_those_compose_and_the_image_run():
    commands = scaling_out_commands()
    check_workers_and_beat(commands)
    compose = [s.get("command") or [] for s in compose_services().values()]
    web = [c for c in commands if "agentplatform.asgi:application" in c]
    assert len(web) == 1
    assert from_app(web[0]) == from_app(compose_services()["web"]["command"])
    assert from_app(web[0]) == from_app(dockerfile_command())
    for role in ("run", "batch"):
        ours = next(c for c in commands if celery_role(c) == role)
        theirs = next(c for c in compose if celery_role(c) == role)
        assert essentials(ours) == essentials(theirs), role


def test_the_deployment_table_gives_the_scaling_out_commands():
    text = operations_text()
    table = text[text.index("## Deployment shape") :]
    for command in scaling_out_commands():
        shown = shlex.join(command)
        name = option(command, "-n")
        if name:  # the table spells the numbered names as runs<i>@%h
            shown = shown.replace(name, re.sub(r"\d+@", "<i>@", name))
        if "beat" in command:
            shown = shown.split(" --schedule")[0]
        assert shown in table, shown
