"""Stop a run cleanly on SIGTERM/SIGINT: the runner checkpoints and returns.

Only the command-line tool installs these handlers (library code never touches process
state). The first signal asks the run to stop after the current host call; a second SIGINT
(Ctrl-C twice) gives up at once with `KeyboardInterrupt`.

Python runs a signal handler only when the main thread returns to the interpreter, which
a thread blocked in a collective (waiting for another process) never does. So the
signals also wake a helper thread (through `signal.set_wakeup_fd`), which sets the
request at once and tells its listeners (a multi-process run's watchdog, which holds the
stop to a deadline).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Callable, Iterator


class StopRequest:
    """A `should_stop()` callable set by a signal; `signum` says which signal."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._handled = 0  # signals the main thread's handler has seen
        self._listeners: list[Callable[[int], None]] = []

    def __call__(self) -> bool:
        return self.signum is not None

    def handle(self, signum: int, frame: Any) -> None:
        """The Python handler (main thread). The first signal names the stop: `launch-local`'s
        SIGTERM that follows a terminal's Ctrl-C (SIGINT to the whole group) does not rename it."""
        self._handled += 1
        if self._handled > 1 and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.signum is None:
            self.signum = signum

    def notice(self, signum: int) -> None:
        """The signal as seen by the wake-up thread, possibly before `handle` runs."""
        if self.signum is None:
            self.signum = signum
        for listener in list(self._listeners):
            listener(signum)

    def listen(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Call `listener(signum)` on every stop signal, from the wake-up thread, even while
        the main thread is blocked; returns the function that stops listening."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

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
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    waker = threading.Thread(target=_wake_on_signals, args=(read_fd, request, signums), name="podracer-signals",
                             daemon=True)
    waker.start()
    previous = {signum: signal.signal(signum, request.handle) for signum in signums}
    try:
        yield request
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(write_fd)  # the wake-up thread reads the end of the pipe and returns
        waker.join(1.0)


def _wake_on_signals(read_fd: int, request: StopRequest, signums: tuple[int, ...]) -> None:
    try:
        while data := os.read(read_fd, 64):
            for signum in data:
                if signum in signums:
                    request.notice(signum)
    finally:
        os.close(read_fd)
