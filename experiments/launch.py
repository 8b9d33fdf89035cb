"""`podracer launch-local -n N PRESET [overrides]` (or `--resume RUN_DIR`): N local
processes of one run.

For trying multi-process runs on one machine: a free port on 127.0.0.1 becomes the
coordinator and each process gets its `--distributed.*` overrides. If one process fails,
the others are stopped; the exit status is the first failure's. A stop signal to the launcher
stops every process (each checkpoints, as after a signal of its own).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from experiments.signals import stop_on_signals
from experiments.watchdog import WAIT_FAILED


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_command(train_args: list[str], port: int, n: int, i: int) -> list[str]:
    """`podracer train TRAIN_ARGS` as process `i` of `n`, with the coordinator on `port`."""
    return [
        sys.executable, "-m", "experiments.cli", "train", *train_args,
        "--distributed.coordinator", f"127.0.0.1:{port}",
        "--distributed.num-processes", str(n), "--distributed.process-id", str(i),
    ]


def launch_local(train_args: list[str], num_processes: int, cpu_devices: int | None) -> int:
    """Run `podracer train TRAIN_ARGS` (a preset and overrides, or `--resume RUN_DIR`) as
    `num_processes` processes to completion; returns 0 or the first non-zero exit status
    (`root_status` among processes that failed together).

    SIGTERM or Ctrl-C to the launcher stops the run as it stops any run: every process gets
    SIGTERM, checkpoints and exits within its own `distributed.stop_timeout_s`, and the
    launcher waits for them (128 + the signal); a second Ctrl-C gives up at once."""
    env = dict(os.environ)
    if cpu_devices:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={cpu_devices}".strip()
    port = free_port()
    with stop_on_signals() as stop:
        procs = [
            subprocess.Popen(process_command(train_args, port, num_processes, i), env=env)
            for i in range(num_processes)
        ]
        status, forwarded = 0, False
        try:
            while any(p.poll() is None for p in procs):
                if stop() and not forwarded:  # the processes stop together, each with its deadline
                    forwarded = True
                    _signal(procs, signal.SIGTERM)
                failed = [exit_status(p.returncode) for p in procs if p.returncode not in (None, 0)]
                if failed and not status and not forwarded:
                    status = root_status(failed)
                    print(f"podracer: a process exited with status {status}; stopping the others", file=sys.stderr)
                    _stop(procs)
                time.sleep(0.2)
        except KeyboardInterrupt:  # Ctrl-C twice
            _stop(procs)
            return 130
    if forwarded:
        return 128 + stop.signum
    # Processes that all ended between two polls (one crashed, the others followed it at
    # once) are reported as processes found failed together.
    failed = [exit_status(p.returncode) for p in procs if p.returncode]
    return status or (root_status(failed) if failed else 0)


def exit_status(returncode: int) -> int:
    """A process's exit status as a shell reports it: Popen's -N (killed by signal N) is
    128 + N, which `SystemExit` can pass on (SystemExit(-9) would exit 247)."""
    return 128 - returncode if returncode < 0 else returncode


def root_status(failed: list[int]) -> int:
    """The exit status to report of processes found failed at the same time (in process
    order): the first other than 1, which is also the status of a process that stops
    because another one failed (`experiments.watchdog`), so that a usage error (2) or a
    crash one process had is reported rather than the others' following it."""
    return next((code for code in failed if code != WAIT_FAILED), failed[0])


def _signal(procs: list[subprocess.Popen], signum: int) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signum)


def _stop(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    _signal(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
