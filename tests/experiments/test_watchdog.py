"""The pieces that keep a multi-process run from hanging, in one process: the watchdog's
deadlines, signals that reach a blocked main thread, the start-up agreement's checks, and
metrics timed over completed work (tests/integration/test_multiprocess.py runs them across processes)."""

import os
import signal
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import startup
from experiments.signals import stop_on_signals
from experiments.watchdog import Watchdog
from podracer.config import ConfigError


def watch(timeout_s=60.0, stop_timeout_s=60.0):
    exits = []
    return Watchdog(1, timeout_s, stop_timeout_s, exit=exits.append).start(), exits


def wait_for(condition, within_s=10.0):
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_wait_past_its_deadline_ends_the_process_naming_the_wait(capsys):
    dog, exits = watch(timeout_s=0.3)
    with dog.waiting("the checkpoint of update 4"):
        wait_for(lambda: exits)
    dog.close()
    assert exits == [1]
    err = capsys.readouterr().err
    assert err.startswith("podracer: error: process 1 waited") and "(distributed.timeout_s) for the checkpoint of " \
        "update 4" in err


def test_waits_within_their_deadline_and_no_wait_end_nothing():
    dog, exits = watch(timeout_s=0.5)
    for _ in range(3):
        with dog.waiting("update 1"):
            time.sleep(0.2)
    time.sleep(0.7)  # no wait open: nothing to time out
    dog.close()
    assert exits == []


def test_a_stop_signal_ends_the_process_after_the_stop_timeout(capsys):
    dog, exits = watch(stop_timeout_s=0.3)
    with dog.waiting("the stop agreement after update 7"):
        dog.notice_signal(signal.SIGTERM)
        wait_for(lambda: exits)
    assert exits == [128 + signal.SIGTERM]
    err = capsys.readouterr().err
    assert "stopped by SIGTERM, but the run did not stop within distributed.stop_timeout_s (0.3 s) while waiting " \
        "for the stop agreement after update 7" in err


def test_another_process_failing_ends_this_one_at_once_naming_its_error(capsys, monkeypatch):
    """A process that fails on its own (a damaged shard only it reads) announces it; every
    other process's watchdog, asking every FAILURE_POLL_S, ends its process at once,
    naming that process and its error, without waiting for a deadline or telling the
    others a failure of its own."""
    from podracer import distributed

    announced, left, found = [], [], []

    monkeypatch.setattr(distributed, "failure", lambda timeout_s=None: found[0] if found else None)
    monkeypatch.setattr(distributed, "announce_failure", announced.append)
    monkeypatch.setattr(distributed, "leave", lambda: left.append(True))
    monkeypatch.setattr(distributed, "start_leaving", lambda: True)
    dog, exits = watch()
    dog.connected = True
    with dog.waiting("restoring the latest checkpoint"):
        time.sleep(0.5)
        assert exits == []
        found.append((0, "the checkpoint of update 2 in runs/x/checkpoints cannot be read (...)"))
        wait_for(lambda: exits)  # within seconds (a poll every FAILURE_POLL_S), not the 60 s deadline
    dog.close()
    assert exits == [1] and announced == [] and left == [True]
    assert capsys.readouterr().err == ("podracer: error: process 0 failed: the checkpoint of update 2 in "
                                       "runs/x/checkpoints cannot be read (...) (process 1 stops with it)\n")


def test_ctrl_c_twice_ends_the_process_at_once():
    dog, exits = watch()
    dog.notice_signal(signal.SIGINT)
    assert exits == []
    dog.notice_signal(signal.SIGINT)
    assert exits == [128 + signal.SIGINT]


def test_an_error_inside_a_wait_names_the_wait():
    dog, _ = watch()
    with pytest.raises(RuntimeError) as error, dog.waiting("updates 3-4"):
        raise RuntimeError("Gloo all-reduce failed")
    dog.close()
    assert any("process 1 waited for updates 3-4" in note for note in error.value.__notes__)


@pytest.mark.timeout(60)
def test_a_signal_reaches_the_run_while_the_main_thread_is_blocked():
    """Python runs a signal handler only when the main thread returns to the interpreter;
    a thread blocked in a compiled call (here: until the signal is noticed) never does.
    The wake-up thread sees the signal anyway and tells the listeners."""
    noticed = threading.Event()

    def until_noticed(x):
        assert noticed.wait(20), "the signal was not noticed while the main thread was blocked"
        return x

    blocked = jax.jit(lambda x: jax.experimental.io_callback(until_noticed, x, x))
    with stop_on_signals() as stop:
        seen = []
        stop.listen(lambda signum: (seen.append((signum, stop.signum)), noticed.set()))
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        jax.block_until_ready(blocked(jnp.zeros(())))
        assert seen == [(signal.SIGTERM, signal.SIGTERM)] and stop() and stop.name == "SIGTERM"


def test_first_difference_names_the_field():
    a = {"_type": "Config", "seed": 0, "arch": {"_type": "AnakinConfig", "num_envs": 8}, "agent": {"_type": "PPOConfig"}}
    assert startup.first_difference(a, a) is None
    assert startup.first_difference(a, {**a, "arch": {**a["arch"], "num_envs": 16}}) == ("arch.num_envs", 8, 16)
    assert startup.first_difference(a, {**a, "agent": {"_type": "IMPALAConfig"}}) == ("agent", "PPOConfig",
                                                                                       "IMPALAConfig")


def test_run_dirs_must_agree():
    """Process 0's run directory; another process may be given none or the same one."""
    assert startup.agreed_run_dir([{"run_dir": "runs/a"}, {"run_dir": None}, {"run_dir": "runs/./a"}]) == "runs/a"
    with pytest.raises(ConfigError, match="process 2 has run_dir 'runs/b' but process 0 has 'runs/a'"):
        startup.agreed_run_dir([{"run_dir": "runs/a"}, {"run_dir": None}, {"run_dir": "runs/b"}])


def test_sebulba_rows_count_steps_from_when_their_rollouts_began():
    """A trajectory that waited in a queue was collected before the row's interval began:
    the row's sps counts from its rollout's start, never claiming more steps per second
    than the actors took."""
    from podracer.runner import EpisodeStats
    from sebulba.actor import RolloutItem
    from sebulba.learner import UpdateRecord
    from sebulba.metrics import MetricsReporter

    rows = []
    reporter = MetricsReporter(steps_per_update=1000, updates_per_log=1, num_updates=2, emit=rows.append)
    started = reporter.clock.last - 1.0  # collected during the second before the run's first row
    timings = dict.fromkeys(("env_wait_s", "inference_s", "param_wait_s", "queue_wait_s"), 0.0)
    item = RolloutItem(None, 0, EpisodeStats.host_zeros(), timings, started)
    reporter(UpdateRecord(1, {"loss": np.zeros(())}, [item], [0], 0.0, 0.0, 0, EpisodeStats.host_zeros()))
    assert rows[0]["sps"] <= 1000 / 1.0
