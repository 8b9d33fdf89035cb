"""Deadlines for a multi-process run's waits on the other processes, and stops that work
while the main thread is blocked in one.

An XLA collective (a host call's `pmean`, orbax's checkpoint barrier, the stop agreement)
cannot be interrupted: a process waiting in one for a process that is alive but elsewhere
waits forever, and Python runs no signal handler until it returns. A `Watchdog` thread
holds every wait marked with `waiting(what)` to `timeout_s`, and a stop signal to
`stop_timeout_s`; past either it prints one line naming the wait and where the other
processes are, and ends the process (`os._exit`: nothing else can).

A process that fails on its own (a damaged shard of a checkpoint that only it reads, an
error in its environment) announces it (`distributed.announce_failure`) and leaves; every
other process's watchdog asks for an announcement every `FAILURE_POLL_S` and ends its
process too, naming the failed process and its error, instead of waiting on it in a
collective until `timeout_s`.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator

from podracer import distributed

WAIT_FAILED = 1  # exit status after a wait past its deadline, or when another process failed
REPORT_AFTER_S = 1.0  # a wait longer than this is published for the other processes' diagnoses
DIAGNOSIS_TIMEOUT_S = 5.0  # asking the coordination service where the others are
POLL_S = 0.1
FAILURE_POLL_S = 0.5  # how often a process asks whether another one has failed
CLOSE_WAIT_S = 2.0  # the longest `close` waits for that question's answer


class Watchdog:
    """`distributed.Waits` with deadlines, for process `process_id` of a multi-process run.

    `timeout_s`: the longest one wait may last. `stop_timeout_s`: the longest from the
    first stop signal (`notice_signal`, called even while the main thread is blocked) to
    the exit; a second SIGINT exits at once. `connected` turns true once the
    coordination service can be asked (after `distributed.initialize`): before, a
    diagnosis says nothing about the other processes.
    """

    def __init__(self, process_id: int, timeout_s: float, stop_timeout_s: float,
                 exit: Callable[[int], Any] = os._exit):
        self.process_id = process_id
        self.timeout_s = timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.connected = False
        self._exit = exit
        self._waits: dict[int, list[tuple[str, float]]] = {}  # thread id -> stack of (what, since)
        self._reported: set[tuple[str, float]] = set()
        self._lock = threading.Lock()
        self._signal: tuple[int, float] | None = None
        self._sigints = 0
        self._closed = threading.Event()
        self._reports: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._watch, name="podracer-watchdog", daemon=True)
        self._reporter = threading.Thread(target=self._report_loop, name="podracer-wait-reports", daemon=True)
        self._failures = threading.Thread(target=self._failure_loop, name="podracer-failures", daemon=True)
        self._failing = False

    def start(self) -> "Watchdog":
        self._thread.start()
        self._reporter.start()
        self._failures.start()
        return self

    def close(self) -> None:
        self._closed.set()
        self._reports.put(None)
        if self._failures.is_alive() and threading.current_thread() is not self._failures:
            # No RPC of this thread may be in flight when the process exits: JAX's client
            # aborts the process (std::terminate) if one is.
            self._failures.join(CLOSE_WAIT_S)

    def __enter__(self) -> "Watchdog":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Within the block, this thread waits on the other processes for `what`. An
        exception raised in it gets a note naming the wait and where the others are."""
        thread, entry = threading.get_ident(), (what, time.monotonic())
        with self._lock:
            self._waits.setdefault(thread, []).append(entry)
        try:
            yield
        except Exception as error:
            error.add_note(f"(while process {self.process_id} waited for {what}: {self._diagnose(what)})")
            raise
        finally:
            with self._lock:
                self._waits[thread].remove(entry)
                if entry in self._reported:
                    self._reported.discard(entry)
                    self._reports.put("")

    def notice_signal(self, signum: int) -> None:
        """A stop signal arrived (called from the signal wake-up thread)."""
        if signum == signal.SIGINT:
            self._sigints += 1
            if self._sigints > 1:
                self._fail(128 + signum, "interrupted (Ctrl-C twice); exiting without a checkpoint")
        if self._signal is None:
            self._signal = (signum, time.monotonic())

    def _current(self) -> tuple[str, float] | None:
        """The oldest innermost wait of any thread."""
        with self._lock:
            innermost = [stack[-1] for stack in self._waits.values() if stack]
        return min(innermost, key=lambda entry: entry[1]) if innermost else None

    def _watch(self) -> None:
        while not self._closed.wait(POLL_S):
            now, current = time.monotonic(), self._current()
            if current is not None:
                what, since = current
                if now - since > REPORT_AFTER_S and self.connected:
                    self._report(current)
                if now - since > self.timeout_s:
                    self._fail(WAIT_FAILED, f"process {self.process_id} waited {now - since:.0f} s "
                               f"(distributed.timeout_s) for {what}: {self._diagnose(what)}")
            if self._signal is not None and now - self._signal[1] > self.stop_timeout_s:
                signum = self._signal[0]
                where = "" if current is None else f" while waiting for {current[0]} ({self._diagnose(current[0])})"
                self._fail(128 + signum, f"stopped by {signal.Signals(signum).name}, but the run did not stop "
                           f"within distributed.stop_timeout_s ({self.stop_timeout_s:g} s){where}; exiting "
                           "without a checkpoint (the last complete one stays the latest)")

    def _report(self, entry: tuple[str, float]) -> None:
        """Publish a long wait once, unless it has ended meanwhile (then nothing, so no
        stale report outlives it)."""
        with self._lock:
            active = any(entry in stack for stack in self._waits.values())
            if active and entry not in self._reported:
                self._reported.add(entry)
                self._reports.put(entry[0])

    def _report_loop(self) -> None:
        """Publishes what this process waits for, in order, off the watchdog's thread (an
        RPC to a coordinator in trouble must not hold up the deadlines)."""
        while (what := self._reports.get()) is not None:
            try:
                distributed.report_wait(what)
            except Exception:  # noqa: BLE001 - a report is a courtesy to the others' diagnoses
                pass

    def _failure_loop(self) -> None:
        """Ends this process as soon as another one announces that it failed (one short
        RPC per poll, off the deadline thread)."""
        while not self._closed.wait(FAILURE_POLL_S):
            found = distributed.failure() if self.connected else None
            if found is not None and not self._closed.is_set():  # closed: leaving with its own error
                self._fail(WAIT_FAILED, distributed.followed(found, self.process_id), announce=False)
                return

    def _diagnose(self, what: str) -> str:
        if not self.connected:
            return "not every process has joined the run"
        answer: list[str] = []

        def ask() -> None:
            try:
                answer.append(distributed.describe_others(what))
            except Exception as error:  # noqa: BLE001
                answer.append(f"the coordination service (process 0) did not answer: {error}".splitlines()[0])

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        asking.join(DIAGNOSIS_TIMEOUT_S)
        return answer[0] if answer else "the coordination service (process 0) did not answer"

    def _fail(self, status: int, message: str, announce: bool = True) -> None:
        """Print `message`, tell the other processes (unless it repeats another's failure:
        `announce=False`) and exit; only the first failure of any thread does."""
        with self._lock:
            if self._failing:
                return
            self._failing = True
        if self.connected and not distributed.start_leaving():
            return  # the main thread is leaving with its own error
        print(f"podracer: error: {message}", file=sys.stderr, flush=True)
        if self.connected:
            if announce:
                distributed.announce_failure(message)
            distributed.leave()
        self._exit(status)
        self._closed.set()  # (`os._exit` never returns; a test's `exit` does)
