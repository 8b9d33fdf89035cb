"""Multi-process runs with JAX's own multi-controller runtime (`jax.distributed`).

Every process runs the same program over one mesh of all processes' devices; XLA's
collectives (gloo on CPU, NCCL on GPU, ICI on TPU) carry the gradients. There is no
transport of our own. Call `initialize` before anything else touches JAX's backends.

Small agreements between processes (the config, the run directory, start-up errors) go
through the coordination service's key-value store (`exchange`), whose reads take a
deadline, rather than through XLA collectives, which wait forever for a process that is
alive but elsewhere. What a process is waiting for is published there too
(`report_wait`), so that a process whose wait passes its deadline can say which
processes are missing and where they are (`describe_others`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from contextlib import AbstractContextManager
from typing import Any, Callable, Protocol

import jax
import numpy as np
from jax._src import distributed as jax_distributed

from podracer import parallel
from podracer.config import ConfigError, DistributedConfig


class DistributedError(RuntimeError):
    """A wait on other processes that failed or passed its deadline."""


class Waits(Protocol):
    """Marks the places where a process waits on the others (a runner's collectives, a
    checkpoint, the stop agreement), so that something can hold them to a deadline.
    `what` names the wait the same way in every process, e.g. "updates 5-8"."""

    def waiting(self, what: str) -> AbstractContextManager[None]: ...


class NoWaits:
    """`Waits` that watches nothing: single-process runs and library use."""

    def waiting(self, what: str) -> AbstractContextManager[None]:
        return contextlib.nullcontext()


NO_WAITS = NoWaits()


def is_multiprocess(config: DistributedConfig) -> bool:
    return config.num_processes > 1 or config.coordinator == "auto"


def initialize(config: DistributedConfig) -> None:
    """Join the run's processes (a no-op for a single-process config or if done already).

    `coordinator="auto"` lets JAX detect the cluster (SLURM, Open MPI, cloud TPU pods);
    otherwise `coordinator` is `host:port` of process 0. A process that stops sending
    heartbeats for `heartbeat_timeout_s` makes every other process exit with an error;
    joining and the exit's shutdown barrier wait at most `timeout_s`.
    """
    if not is_multiprocess(config) or jax.distributed.is_initialized():
        return
    # CPU collectives across processes need gloo; GPUs and TPUs ignore this setting.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # JAX's preemption service installs a SIGTERM handler that swallows the signal; the
    # command line's own handlers stop the run (after agreeing with the other processes).
    jax.config.update("jax_enable_preemption_service", False)
    timeouts = {"heartbeat_timeout_seconds": config.heartbeat_timeout_s,
                "initialization_timeout": config.timeout_s, "shutdown_timeout_seconds": config.timeout_s}
    if config.coordinator == "auto":
        try:
            jax.distributed.initialize(**timeouts)
        except ValueError as error:  # JAX detected no cluster (SLURM, Open MPI, a TPU pod) to join
            raise ConfigError(f"distributed.coordinator: 'auto' found no cluster to join here ({error}); give "
                              "host:port of process 0 with --distributed.num-processes and "
                              "--distributed.process-id, or leave distributed.* unset for one process") from None
    else:
        jax.distributed.initialize(coordinator_address=config.coordinator, num_processes=config.num_processes,
                                   process_id=config.process_id, **timeouts)


def process_id() -> int:
    """This process's index; known once `initialize` has joined, before any backend exists."""
    state = _state()
    return state.process_id if state.client is not None else jax.process_index()


def process_count() -> int:
    state = _state()
    return state.num_processes if state.client is not None else jax.process_count()


def is_leader() -> bool:
    """True in the process that writes the run directory (process 0)."""
    return process_id() == 0


_session = 0


def new_session() -> None:
    """Start a fresh key namespace: every process calls it once per run (train or resume)."""
    global _session
    _session += 1


def _key(*parts: str) -> str:
    return "/".join(("podracer", str(_session)) + tuple(part.replace(" ", "_") for part in parts))


def exchange(name: str, value: Any, timeout_s: float) -> list[Any]:
    """Every process's `value` (JSON-able), in process order: an all-gather through the
    coordination service's key-value store. Every process must call it with the same
    `name` once per session. Raises DistributedError naming the processes whose value
    did not come within `timeout_s`."""
    client, me = _state().client, process_id()
    client.key_value_set(_key(name, str(me)), json.dumps(value))
    deadline = time.monotonic() + timeout_s
    values: list[Any] = []
    missing: list[int] = []
    for other in range(process_count()):
        if other == me:
            values.append(value)
            continue
        remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            values.append(json.loads(client.blocking_key_value_get(_key(name, str(other)), remaining_ms)))
        except jax.errors.JaxRuntimeError as error:
            if "DEADLINE_EXCEEDED" not in str(error):
                raise
            missing.append(other)
            values.append(None)
    if missing:
        raise DistributedError(f"process {me} waited {timeout_s:g} s (distributed.timeout_s) for {name}: "
                               f"{describe_others(name, missing)}")
    return values


def sync(name: str, timeout_s: float) -> None:
    """Wait until every process gets here (`exchange` of nothing: a barrier with a deadline)."""
    if process_count() > 1:
        exchange(name, None, timeout_s)


def connect(mesh: jax.sharding.Mesh, timeout_s: float) -> None:
    """Meet every process, then run one collective over `mesh` at once.

    Gloo (XLA's CPU collectives) connects the processes of a set of devices at its first
    collective and fails if one of them comes more than 30 s after another (a compile on
    one and a cache hit on another can differ by more); later collectives on the same
    devices wait as long as they must. So each runner connects its mesh while every
    process is at the same point, before anything compiles."""
    devices = tuple(device.id for device in mesh.devices.flat)
    if process_count() > 1 and devices not in _connected:
        sync(f"connecting devices {devices[0]}-{devices[-1]} ({len(devices)})", timeout_s)
        parallel.process_sum(np.zeros((), np.float32), mesh)
        _connected.add(devices)


_connected: set[tuple[int, ...]] = set()  # device sets connected in this process (for its lifetime)


def report_wait(what: str) -> None:
    """Publish what this process is waiting for now ("" when nothing)."""
    _state().client.key_value_set(_key("waiting", str(process_id())), what, allow_overwrite=True)


def describe_others(what: str, missing: list[int] | None = None) -> str:
    """Which other processes are not waiting for `what` (all of `missing`, if given), and
    where they are: waiting for something else, or silent (busy, or stuck where it does
    not wait on the others). A process that died is not among them for long: once its
    heartbeats stop for `heartbeat_timeout_s`, JAX ends every process of the run. Asks
    the coordination service (one RPC)."""
    client, me = _state().client, process_id()
    prefix = _key("waiting") + "/"
    reports = {int(key.rsplit("/", 1)[1]): value for key, value in client.key_value_dir_get(prefix)}
    parts = []
    for other in range(process_count()):
        if other == me or (missing is None and reports.get(other) == what):
            continue  # this process, or one waiting for the same thing
        if missing is not None and other not in missing:
            continue
        if reports.get(other):
            parts.append(f"process {other} is waiting for {reports[other]}")
        else:
            parts.append(f"process {other} has not reached it (it is busy, stuck or gone)")
    return "; ".join(parts) if parts else "every other process is waiting for it too"


ANNOUNCE_TIMEOUT_S = 5.0  # the longest an announcement to the coordination service may take
LEAVE_TIMEOUT_S = 2.0  # the longest process 0 waits for the others to leave a failed run
LEAVE_GRACE_S = 0.2


def announce_failure(message: str) -> None:
    """Tell the other processes that this one fails with `message` (one line) and leaves
    the run: their watchdogs (`experiments.watchdog`), which ask for one (`failure`), then
    end them at once, rather than when a wait on this process passes its deadline. The first
    announcement of a session stands (later ones are refused). Best effort, within
    `ANNOUNCE_TIMEOUT_S` (the coordinator may be gone)."""
    client, value = _state().client, json.dumps({"process": process_id(), "message": message})
    _bounded(lambda: client.key_value_set(_key("failed"), value), ANNOUNCE_TIMEOUT_S)


def failure(timeout_s: float | None = None) -> tuple[int, str] | None:
    """`(process, message)` if another process has announced a failure, else None (also
    when the coordination service does not answer, within `timeout_s` if given). One
    short RPC."""
    me, client = process_id(), _state().client

    def ask() -> tuple[int, str] | None:
        announced = json.loads(client.key_value_try_get(_key("failed")))  # NOT_FOUND: none
        return (announced["process"], announced["message"]) if announced["process"] != me else None

    return _ask_safely(ask) if timeout_s is None else _bounded(ask, timeout_s)


def followed(failed: tuple[int, str], me: int) -> str:
    """The line process `me` leaves with when it stops because another one failed
    (`failure()`'s answer)."""
    other, message = failed
    return f"process {other} failed: {message} (process {me} stops with it)"


_leaving = threading.Lock()


def start_leaving() -> bool:
    """True for the first thread of this process to leave a failed run (the main thread
    with its error, or the watchdog's with a deadline or another process's failure): only
    that one prints its line and exits, so a process says one thing."""
    return _leaving.acquire(blocking=False)


def leave() -> None:
    """This process leaves a failed run now: it says so, and process 0, which hosts the
    coordination service (its end aborts every other process with JAX's fatal "the
    distributed service detected fatal errors"), first waits up to `LEAVE_TIMEOUT_S` for
    the others to say so too, so that each exits with its own message and status."""
    client, me = _state().client, process_id()
    _bounded(lambda: client.key_value_set(_key("left", str(me)), "", allow_overwrite=True), ANNOUNCE_TIMEOUT_S)
    if me != 0:
        return
    deadline = time.monotonic() + LEAVE_TIMEOUT_S
    for other in range(1, process_count()):
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        left = functools.partial(client.blocking_key_value_get, _key("left", str(other)), remaining_ms)
        if remaining_ms <= 0 or _ask_safely(left) is None:
            return  # one that died or is stuck: leave anyway
    time.sleep(LEAVE_GRACE_S)  # from its announcement to its exit


def _ask_safely(call: Callable[[], Any]) -> Any:
    """`call()`, or None if it raised (a coordination service that is gone or past a deadline)."""
    try:
        return call()
    except Exception:  # noqa: BLE001 - best effort: the caller is leaving the run either way
        return None


def _bounded(call: Callable[[], Any], timeout_s: float) -> Any:
    """`_ask_safely(call)` in a helper thread, given up on (None) after `timeout_s`: an RPC to
    a coordinator that is stuck may never return."""
    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.append(_ask_safely(call)), daemon=True)
    thread.start()
    thread.join(timeout_s)
    return answer[0] if answer else None


def _state() -> Any:
    """JAX's distributed state: the coordinator's client once `jax.distributed.initialize` ran."""
    return jax_distributed.global_state
