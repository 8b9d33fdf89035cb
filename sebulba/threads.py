"""Threads that stop together: one stop event, faults re-raised in the caller.

Every blocking wait in Sebulba is a short timed wait in a loop that checks the stop event
(`put`, `get`, `ParamSource.latest`), so setting it ends every thread within a fraction
of a second plus whatever environment step or compiled call is in flight.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

POLL_S = 0.05


class Stopped(Exception):
    """Raised inside a thread's wait when the group is stopping; ends the thread quietly."""


class ThreadGroup:
    """Threads sharing one stop event. The first exception in any of them (other than
    `Stopped`) is kept and stops all of them; `raise_error` re-raises it in the caller."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()

    def start(self, name: str, target: Callable[..., Any], *args: Any) -> None:
        thread = threading.Thread(target=self._run, args=(name, target, args), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _run(self, name: str, target: Callable[..., Any], args: tuple) -> None:
        try:
            target(*args)
        except Stopped:
            pass
        except BaseException as error:  # noqa: BLE001 - every fault must reach the caller
            error.add_note(f"(raised in Sebulba thread {name!r})")
            self.fail(error)

    def fail(self, error: BaseException) -> None:
        """Record `error` (the first one wins) and stop every thread."""
        with self._lock:
            self._errors.append(error)
        self.stop.set()

    @property
    def error(self) -> BaseException | None:
        with self._lock:
            return self._errors[0] if self._errors else None

    def join(self, timeout_s: float = 10.0) -> list[str]:
        """Stop and join every thread; the names of those still running after `timeout_s`."""
        self.stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self._threads if t.is_alive()]

    def raise_error(self) -> None:
        error = self.error
        if error is not None:
            raise error


def put(q: queue.Queue, item: Any, stop: threading.Event) -> float:
    """Put `item` into the bounded queue `q`, waiting while it is full: seconds waited."""
    start = time.perf_counter()
    while True:
        if stop.is_set():
            raise Stopped
        try:
            q.put(item, timeout=POLL_S)
            return time.perf_counter() - start
        except queue.Full:
            continue


def get(q: queue.Queue, stop: threading.Event, timeout_s: float | None = None) -> tuple[Any, float]:
    """Take an item from `q`, waiting while it is empty: `(item, seconds waited)`; with
    `timeout_s`, `queue.Empty` when none came in that time."""
    start = time.perf_counter()
    while True:
        if stop.is_set():
            raise Stopped
        try:
            return q.get(timeout=POLL_S), time.perf_counter() - start
        except queue.Empty:
            if timeout_s is not None and time.perf_counter() - start >= timeout_s:
                raise
