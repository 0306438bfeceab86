"""Starts the fake identity provider as a second process on a free loopback port."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class OIDCProvider:
    process: subprocess.Popen
    port: int
    directory: tempfile.TemporaryDirectory

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.base}/o"

    def user(self, username: str, *, groups=(), knob: str = "", email: str = "") -> None:
        """Create or update a user at the provider (password: the username twice)."""
        body = {
            "username": username,
            "password": username * 2,
            "email": email or f"{username}@example.org",
            "groups": list(groups),
            "knob": knob,
        }
        requests.post(f"{self.base}/test/users", json=body, timeout=10).raise_for_status()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.directory.cleanup()


def start_oidc_provider(port: int, redirect_uris: str, timeout_s: float = 60) -> OIDCProvider:
    directory = tempfile.TemporaryDirectory(prefix="fake-oidc-")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "OIDC_FAKE_REDIRECT_URIS": redirect_uris,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.oidc_provider.run", str(port), directory.name],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(Path(directory.name) / "provider.log", "w"),  # noqa: SIM115 (the process keeps it)
    )
    provider = OIDCProvider(process=process, port=port, directory=directory)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the fake OIDC provider exited ({process.returncode})")
        try:
            if requests.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=2).ok:
                return provider
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    provider.stop()
    raise RuntimeError("the fake OIDC provider did not start in time")
