"""Stop a run cleanly on SIGTERM/SIGINT: the runner checkpoints and returns.

Only the command-line tool installs these handlers (library code never touches process
state). The first signal asks the run to stop after the current host call; a second SIGINT
(Ctrl-C twice) gives up at once with `KeyboardInterrupt`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator


class StopRequest:
    """A `should_stop()` callable set by a signal handler; `signum` says which signal."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self) -> bool:
        return self.signum is not None

    def handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""


@contextlib.contextmanager
def stop_on_signals(signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[StopRequest]:
    """Within the block, the given signals set the yielded `StopRequest` instead of
    killing the process; the previous handlers come back afterwards. Outside the main
    thread (where Python cannot install handlers) the request is never set."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {signum: signal.signal(signum, request.handle) for signum in signums}
    try:
        yield request
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
