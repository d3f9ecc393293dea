"""A wall-clock limit for tests of inputs that must end quickly (shared test helper)."""
from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fail (rather than hang) if the block runs longer than `seconds`."""
    def expire(*_: object) -> None:
        raise TimeoutError(f"took more than {seconds} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
