"""Child processes that must not outlive their parent (serve's web server and worker)."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """For `preexec_fn`: the child gets SIGTERM when its parent dies without stopping it
    (e.g. SIGKILL). Linux only; elsewhere children stop only when the parent stops them."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):  # a libc without prctl
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
