"""`podracer launch-local`: the launcher of local multi-process runs, here with stand-in
processes (no JAX), so that what it does with signals is quick to see."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.helpers import subprocess_env

pytestmark = pytest.mark.timeout(120)

# A stand-in for `podracer train`: says it is ready, then on SIGTERM writes that it stopped
# (where a run checkpoints) and exits as a stopped run does.
CHILD = """
import os, signal, sys, time
out = sys.argv[1]
def stop(signum, frame):
    open(out + ".stopped", "w").close()
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
with open(out + ".pid", "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)
"""

LAUNCHER = """
import sys
from experiments import launch
launch.process_command = lambda args, port, n, i: [sys.executable, "-c", sys.argv[1], f"{sys.argv[2]}/{i}"]
sys.exit(launch.launch_local([], 2, None))
"""


@pytest.mark.costly
def test_sigterm_to_the_launcher_stops_every_process(tmp_path):
    """SIGTERM to `launch-local` (a scheduler's, or `kill`) reaches every process of the run,
    which stops as after a signal of its own, and the launcher waits for them and exits 143;
    it never leaves them running on their own."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, CHILD, str(tmp_path)],
                                env=subprocess_env())
    pids = [tmp_path / f"{i}.pid" for i in range(2)]
    try:
        deadline = time.monotonic() + 60
        while not all(p.exists() and p.read_text() for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(p.exists() for p in pids), "the stand-in processes did not start"
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=30) == 128 + signal.SIGTERM
        assert all((tmp_path / f"{i}.stopped").exists() for i in range(2))
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for p in pids:  # orphans, were the launcher to leave them
            try:
                os.kill(int(p.read_text()), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def test_the_status_reported_is_the_failure_the_others_followed():
    """Processes found failed in the same poll: process 0 stopping because process 1 failed
    (status 1) does not hide process 1's own status (2, a usage error); a lone 1 is a 1."""
    from experiments.launch import root_status

    assert root_status([1, 2]) == 2
    assert root_status([1, 134, 2]) == 134
    assert root_status([1, 1]) == 1
    assert root_status([2]) == 2


# Process 1 is killed (SIGKILL, as by the OOM killer); process 0 fails at once after it
# (status 1, as a process whose collective lost its peer), before the launcher's next poll.
CHILD_KILLED = """
import os, signal, sys, time
out = sys.argv[1]
index = int(out.rsplit("/", 1)[1])
if index == 1:
    time.sleep(0.5)
    open(out + ".dead", "w").close()
    os.kill(os.getpid(), signal.SIGKILL)
peer = out.rsplit("/", 1)[0] + "/1.dead"
while not os.path.exists(peer):
    time.sleep(0.001)
sys.exit(1)
"""


@pytest.mark.costly
def test_a_killed_process_is_the_status_reported_even_when_the_others_end_with_it(tmp_path):
    """The process that was killed, not the one that followed it, names the launcher's exit
    status, as 128 + the signal (a shell's convention; Popen's -9 would exit 247)."""
    launcher = subprocess.run([sys.executable, "-c", LAUNCHER, CHILD_KILLED, str(tmp_path)],
                              env=subprocess_env(), timeout=60)
    assert launcher.returncode == 128 + signal.SIGKILL


def test_exit_status_of_a_signalled_process():
    from experiments.launch import exit_status

    assert exit_status(-9) == 137
    assert exit_status(-15) == 143
    assert exit_status(2) == 2
