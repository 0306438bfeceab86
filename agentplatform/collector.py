"""The cyclic garbage collector of a long-lived process: the web server, a worker, serve's
preloading parent (and the test suite's processes, tests/conftest.py)."""

from __future__ import annotations

import gc

# A young collection every 10,000 container objects allocated and kept, not Python's 700.
# In bench/api.py's bursts of chats the default made the collector 9% of the web process's
# CPU and 3.5% of a runs worker's (full collections of about 100 and 30 ms, each the 100th
# young one); with this, 3% and under 1% (each collection timed with gc.callbacks).
YOUNG_THRESHOLD = 10_000


def freeze_what_was_loaded() -> None:
    """What is loaded by now lives as long as the process: out of the collector's sight, a
    full collection scans only what came after (a web process's took 130 ms, then 20).
    From now on it collects less often."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
