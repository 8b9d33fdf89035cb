"""Sebulba shutdown: a fault in any thread, or Ctrl-C, stops every thread within seconds
and reaches the caller with its cause; no thread is left running."""

from __future__ import annotations

import _thread
import dataclasses
import threading
import time

import numpy as np
import pytest

import sebulba.actor
import sebulba.learner
import sebulba.runner
from experiments import train as train_lib
from podracer.agents import PPOConfig
from podracer.checkpoint import Checkpointer, checkpoint_dir
from podracer.config import Config, EnvConfig
from podracer.envs.host import make_host_env
from podracer.runner import NonFiniteError
from sebulba import SebulbaConfig, train
from tests.support.helpers import nan_loss_at

pytestmark = pytest.mark.timeout(90)


def fault_config() -> Config:
    """Small and slow to finish (many updates), so that the fault comes mid-run."""
    return Config(
        env=EnvConfig("CartPole-v1"),
        agent=PPOConfig(num_minibatches=1, num_epochs=1, hidden_sizes=(8,)),
        arch=SebulbaConfig(num_envs=8, rollout_length=8, actor_devices=(0, 1), learner_devices=(2, 3),
                           threads_per_actor_device=2, max_policy_lag=1, updates_per_log=1),
        total_env_steps=8 * 8 * 100_000,
    )


def sebulba_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("actor-", "learner"))]


class FailingEnv:
    """A host env whose `recv` raises after `fail_after` steps (and records when)."""

    def __init__(self, env, fail_after: int, failed_at: list[float]) -> None:
        self._env, self._left, self._failed_at = env, fail_after, failed_at
        self.num_envs, self.observation_spec, self.action_spec = env.num_envs, env.observation_spec, env.action_spec

    def reset(self):
        return self._env.reset()

    def send(self, action):
        self._env.send(action)

    def recv(self):
        self._left -= 1
        if self._left < 0:
            self._failed_at.append(time.monotonic())
            raise RuntimeError("the environment exploded")
        return self._env.recv()

    def close(self):
        self._env.close()


@pytest.mark.slow
def test_env_that_raises_stops_every_thread(monkeypatch):
    failed_at: list[float] = []

    def make_env(config, num_envs, seed, num_threads=0):
        env = make_host_env(config, num_envs, seed, num_threads)
        return FailingEnv(env, 200, failed_at) if seed == sebulba.runner.actor_seed(0, 3) else env

    monkeypatch.setattr(sebulba.actor, "make_host_env", make_env)
    with pytest.raises(RuntimeError, match="exploded") as info:
        train(fault_config())
    assert time.monotonic() - failed_at[0] < 10
    assert any("actor-3" in note for note in info.value.__notes__)
    assert sebulba_threads() == []


@pytest.mark.slow
def test_nan_in_the_learner_stops_every_thread(monkeypatch):
    failed_at: list[float] = []
    poisoned = nan_loss_at(sebulba.runner.make_update_step, 5, failed_at)
    monkeypatch.setattr(sebulba.runner, "make_update_step", poisoned)
    with pytest.raises(NonFiniteError, match="loss.*update 5") as info:
        train(fault_config())
    assert time.monotonic() - failed_at[0] < 10
    assert any("learner" in note for note in info.value.__notes__)
    assert sebulba_threads() == []


@pytest.mark.slow
def test_ctrl_c_stops_cleanly():
    interrupted_at: list[float] = []

    def on_metrics(row):
        if row["env_steps"] >= 8 * 8 * 3 and not interrupted_at:
            interrupted_at.append(time.monotonic())
            threading.Timer(0.2, _thread.interrupt_main).start()  # Ctrl-C while it waits

    with pytest.raises(KeyboardInterrupt):
        train(fault_config(), on_metrics)
    assert time.monotonic() - interrupted_at[0] < 10
    assert sebulba_threads() == []


@pytest.mark.slow
def test_error_in_the_metrics_callback_stops_cleanly():
    def on_metrics(row):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        train(fault_config(), on_metrics)
    assert sebulba_threads() == []


class StuckEnv(FailingEnv):
    """A host env whose `recv` blocks after `stuck_after` steps until `release` is set, as a
    simulator that hangs does."""

    def __init__(self, env, stuck_after: int, stuck: threading.Event, release: threading.Event) -> None:
        super().__init__(env, stuck_after, [])
        self._stuck, self._release = stuck, release

    def recv(self):
        self._left -= 1
        if self._left < 0:
            self._stuck.set()
            self._release.wait()
        return self._env.recv()


@pytest.mark.slow
def test_stop_request_ends_a_run_whose_actor_is_stuck(monkeypatch, tmp_path):
    """A SIGTERM (here `should_stop`) while an actor hangs inside its environment: the
    single-process learner gives up on that actor's trajectory after its grace period,
    checkpoints the updates it applied, and the run returns as stopped within seconds; the
    stuck thread is named in a warning, not waited on. The run then resumes."""
    stuck, release = threading.Event(), threading.Event()

    def make_env(config, num_envs, seed, num_threads=0):
        env = make_host_env(config, num_envs, seed, num_threads)
        return StuckEnv(env, 200, stuck, release) if seed == sebulba.runner.actor_seed(0, 3) else env

    monkeypatch.setattr(sebulba.actor, "make_host_env", make_env)
    monkeypatch.setattr(sebulba.runner, "JOIN_TIMEOUT_S", 2.0)
    monkeypatch.setattr(sebulba.learner, "STUCK_S", 1.0)
    stuck_at: list[float] = []
    requested_at: list[float] = []

    def should_stop() -> bool:  # a second after the actor hangs: the learner is waiting on it by then
        if stuck.is_set() and not stuck_at:
            stuck_at.append(time.monotonic())
        if stuck_at and not requested_at and time.monotonic() - stuck_at[0] > 1.0:
            requested_at.append(time.monotonic())
        return bool(requested_at)

    config = dataclasses.replace(fault_config(), run_dir=str(tmp_path / "run"))
    try:
        with pytest.warns(RuntimeWarning, match="actor-3"):
            result = train_lib.train(config, console=False, should_stop=should_stop)
        assert result.stopped
        assert time.monotonic() - requested_at[0] < 10
        assert sebulba_threads() == ["actor-3"]
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while sebulba_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sebulba_threads() == []
    updates = int(result.state.update_count)
    assert updates >= 1
    with Checkpointer(checkpoint_dir(config.run_dir), read_only=True) as checkpoints:
        assert checkpoints.latest_step() == updates
        assert checkpoints.progress().env_steps == result.env_steps
    rows: list[dict] = []  # a row per update: stop after the first update of the resumed session
    resumed = train_lib.resume(config.run_dir, console=False, on_metrics=rows.append, should_stop=lambda: bool(rows))
    assert resumed.stopped and int(resumed.state.update_count) > updates


class NanRewardEnv(FailingEnv):
    """A host env whose rewards turn NaN after `fail_after` steps."""

    def recv(self):
        self._left -= 1
        step = self._env.recv()
        if self._left >= 0:
            return step
        return step._replace(timestep=step.timestep._replace(reward=step.timestep.reward * np.nan))


@pytest.mark.costly
def test_a_nan_reward_stops_every_thread_naming_the_environment(monkeypatch):
    """A host environment that returns NaN rewards ends the run promptly with a
    `NonFiniteError` (the command line's one line, exit 1) naming the environment, not the
    loss it would have made non-finite; every thread stops."""
    def make_env(config, num_envs, seed, num_threads=0):
        env = make_host_env(config, num_envs, seed, num_threads)
        return NanRewardEnv(env, 20, []) if seed == sebulba.runner.actor_seed(0, 2) else env

    monkeypatch.setattr(sebulba.actor, "make_host_env", make_env)
    with pytest.raises(NonFiniteError, match=r"^host environment CartPole-v1 returned a non-finite reward at step 21 "
                                             r"of its environment 0 \(actor thread 2\)"):
        train(fault_config())
    assert sebulba_threads() == []
