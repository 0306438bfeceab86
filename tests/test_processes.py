"""tests/processes.py: a warm child answers as a process started with subprocess would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests import processes

pytestmark = pytest.mark.integration  # starts processes

ECHO = """
import os, sys
print("out", sys.argv[1:], os.environ.get("AP_PROBE"), os.getcwd())
print("err", sys.stdin.read(), file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def test_a_warm_child_has_its_arguments_environment_directory_streams_and_status(tmp_path):
    env = {**os.environ, "AP_PROBE": "seen"}
    done = processes.run(
        [sys.executable, "-c", ECHO, "3"],
        env=env,
        cwd=tmp_path,
        input="in",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 3
    assert done.stdout == f"out ['3'] seen {tmp_path}\n"
    assert done.stderr == "err in\n"
    assert "AP_PROBE" not in os.environ  # (the test's own environment is untouched)


def test_a_warm_child_is_not_its_server_and_its_modules_are_its_own():
    code = "import os, sys; print(os.getpid(), 'agentplatform.settings' in sys.modules)"
    done = processes.run([sys.executable, "-c", code], capture_output=True, text=True)
    pid, settings_loaded = done.stdout.split()
    assert int(pid) != os.getpid() and settings_loaded == "False"  # no settings until it asks


def test_what_a_child_raises_is_printed_and_it_exits_1():
    done = processes.run(
        [sys.executable, "-c", "raise ValueError('boom')"], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "ValueError: boom"


def test_a_child_in_a_session_of_its_own_is_killed_with_its_group():
    child = processes.spawn(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    assert os.getpgid(child.pid) == child.pid  # at once: a killpg right away reaches it
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL
    assert child.poll() == -signal.SIGKILL


def test_other_interpreter_flags_start_cold():
    child = processes.spawn([sys.executable, "-S", "-c", "pass"])
    assert isinstance(child, subprocess.Popen)
    assert child.wait(30) == 0
