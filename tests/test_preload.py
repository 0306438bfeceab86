"""serve's children forked from one preloaded process (agentplatform/preload.py): each runs its
command as `python -m` would, and the web's rules that depend on how it starts still hold when
its settings were loaded before it. serve end to end: tests/test_serve.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, subprocess_env

pytestmark = pytest.mark.integration  # child Pythons


def run_child(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**subprocess_env(), **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


FORKS = """
import json, os, sys, time
from agentplatform.preload import start

def wait(pid):
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

out = {}
source, target = sys.argv[1], sys.argv[2]
# The module's main, its arguments, its exit status: as `python -m json.tool SOURCE TARGET`.
out["ok"] = wait(start([sys.executable, "-m", "json.tool", "--compact", source, target]))
out["written"] = open(target).read()
out["failed"] = wait(start([sys.executable, "-m", "json.tool", source + ".missing"]))
out["executed"] = wait(start(["/bin/sh", "-c", "exit 3"]))  # not `python -m`: run as it is
# Named as its command while it runs (what ps and bench/footprint.py see): it runs until the
# file `done` exists, made once its title shows.
done = target + ".done"
wait_for_done = f"import os, time\\nwhile not os.path.exists({done!r}): time.sleep(0.01)"
pid = start([sys.executable, "-m", "timeit", "-n", "1", "-r", "1", wait_for_done])
def title():
    return open(f"/proc/{pid}/cmdline", "rb").read().decode().replace("\\0", " ")

deadline = time.monotonic() + 30
while "-m timeit -n 1" not in title() and time.monotonic() < deadline:
    time.sleep(0.01)
out["title"] = title()
open(done, "w").close()
out["sleeper"] = wait(pid)
print(json.dumps(out))
"""


def test_a_forked_child_runs_its_module_as_python_dash_m_would(tmp_path):
    source, target = tmp_path / "in.json", tmp_path / "out.json"
    source.write_text('{"a": [1, 2]}')
    out = subprocess.run(
        [sys.executable, "-c", FORKS, str(source), str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["ok"] == 0 and result["written"].strip() == '{"a":[1,2]}', out.stderr
    assert result["failed"] != 0  # the module's own exit status, not the parent's
    assert result["executed"] == 3
    assert "-m timeit -n 1" in result["title"] and result["sleeper"] == 0


PRELOADED_WEB = """
import django
django.setup()  # as agentplatform.preload does before forking the web server
from django.conf import settings
import agentplatform.asgi
print(settings.DATABASES["default"]["CONN_MAX_AGE"])
"""


def test_the_web_connects_per_request_even_when_its_settings_were_loaded_before_it():
    # Without the pool, a web process keeps no connection for reuse: each request's sync
    # code runs in a thread of its own (agentplatform/asgi.py), however it was started.
    out = run_child(PRELOADED_WEB, DB_POOL_MAX_SIZE="0")
    assert out.stdout.split() == ["0"], out.stderr[-2000:]
    out = run_child(PRELOADED_WEB, DB_POOL_MAX_SIZE="0", DB_CONN_MAX_AGE="30")
    assert out.stdout.split() == ["30"], out.stderr[-2000:]
