"""The Sebulba actor's trajectory assembly, step by step, on a fake host environment whose
observations are numbered and whose episodes end on a fixed schedule (truncated and
terminated), so every field of every step is known in closed form."""

from __future__ import annotations

import queue
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sebulba.actor
from podracer import parallel
from podracer.config import EnvConfig
from podracer.envs.host import HostStep
from podracer.types import Agent, DiscreteSpec, ObsSpec, TimeStep
from sebulba.actor import Actor, make_policy_step
from sebulba.learner import trajectory_sharding
from sebulba.params import ParamSource

pytestmark = pytest.mark.timeout(60)

# Env i's episodes last LENGTHS[i] steps; env 0 and 1 are truncated then, env 2 terminates,
# env 3 never ends.
LENGTHS = (2, 3, 4, 10**6)
TERMINATES = (False, False, True, False)
T, ROLLOUTS, VERSION = 5, 3, 7  # VERSION >= ROLLOUTS: no rollout waits for parameters


class NumberedEnv:
    """A host environment of 4 envs: env i in step k of its episode e observes `[i, e, k]`;
    its step reward is `100 i + 10 e + k` (k counted after the step). Records the actions."""

    num_envs = len(LENGTHS)
    observation_spec = ObsSpec((3,), np.float32)
    action_spec = DiscreteSpec(3)

    def __init__(self) -> None:
        self.episode = np.zeros(self.num_envs, np.int64)
        self.k = np.zeros(self.num_envs, np.int64)
        self.returns = np.zeros(self.num_envs, np.float32)
        self.actions: list[np.ndarray] = []
        self.closed = False

    def _obs(self) -> np.ndarray:
        return np.stack([np.arange(self.num_envs), self.episode, self.k], axis=1).astype(np.float32)

    def reset(self) -> np.ndarray:
        """A fresh episode for every env (the actor resets once, before its first rollout)."""
        self.episode[self.k > 0] += 1
        self.k[:] = 0
        self.returns[:] = 0.0
        return self._obs()

    def send(self, action: np.ndarray) -> None:
        self.actions.append(np.array(action))

    def recv(self) -> HostStep:
        self.k += 1
        reward = (100 * np.arange(self.num_envs) + 10 * self.episode + self.k).astype(np.float32)
        self.returns += reward
        final_obs = self._obs()
        ended = self.k == np.array(LENGTHS)
        terminated, truncated = ended & np.array(TERMINATES), ended & ~np.array(TERMINATES)
        episode_return, episode_length = self.returns.copy(), self.k.astype(np.int32)
        self.episode[ended] += 1
        self.k[ended] = 0
        self.returns[ended] = 0.0
        return HostStep(TimeStep(self._obs(), reward, terminated, truncated, final_obs, episode_return,
                                 episode_length), ended)

    def close(self) -> None:
        self.closed = True


def expected_step(n: int) -> dict[str, np.ndarray]:
    """What global step `n` (0-based, over all rollouts) must hold for the 4 envs."""
    i = np.arange(len(LENGTHS))
    length = np.array(LENGTHS)
    episode, k = n // length, n % length
    ended = k + 1 == length
    return {
        "obs": np.stack([i, episode, k], axis=1).astype(np.float32),
        "next_obs": np.stack([i, episode, k + 1], axis=1).astype(np.float32),  # before any reset
        "reward": (100 * i + 10 * episode + k + 1).astype(np.float32),
        "terminated": ended & np.array(TERMINATES),
        "truncated": ended & ~np.array(TERMINATES),
        "action": ((k + VERSION) % 3).astype(np.int32),
        "value": (2 * k + VERSION).astype(np.float32),
    }


def act(params, obs, key):
    """A policy whose outputs name the step and the parameters it saw."""
    k = obs[:, 2]
    return ((k + params).astype(jnp.int32) % 3), {"value": 2 * k + params, "log_prob": obs[:, 0]}


def test_actor_assembles_trajectories_step_by_step(monkeypatch):
    """Three rollouts of 5 steps from an `Actor`, as the learner receives them: every field
    of every step equals its closed form, across episode ends of both kinds and across
    rollout boundaries (the next rollout goes on from the last observation)."""
    env = NumberedEnv()
    monkeypatch.setattr(sebulba.actor, "make_host_env", lambda *args, **kwargs: env)
    source = ParamSource(jax.devices()[0])
    source.publish(jnp.float32(VERSION), VERSION)
    mesh = parallel.make_mesh(jax.devices()[1:3], "learner")
    out: queue.Queue = queue.Queue(ROLLOUTS)
    agent = Agent(init=None, act=act, update=None)
    actor = Actor(index=0, env_config=EnvConfig("CartPole-v1"), num_envs=4, seed=0, env_threads=1,
                  rollout_length=T, max_policy_lag=0, policy_step=make_policy_step(agent), params=source,
                  agent=agent, out=out, sharding=trajectory_sharding(mesh), num_rollouts=ROLLOUTS)
    actor.run(threading.Event())
    assert env.closed and out.qsize() == ROLLOUTS

    for r in range(ROLLOUTS):
        item = out.get_nowait()
        assert item.version == VERSION
        traj = jax.device_get(item.trajectory)
        assert item.trajectory.obs.sharding.spec == jax.sharding.PartitionSpec(None, "learner")
        ended_return = ended_length = ended = 0.0
        for t in range(T):
            n = r * T + t
            expected = expected_step(n)
            for field in ("obs", "next_obs", "reward", "terminated", "truncated", "action"):
                got = np.asarray(getattr(traj, field)[t])
                assert got.dtype == expected[field].dtype, field
                np.testing.assert_array_equal(got, expected[field], err_msg=f"{field} at step {n}")
            np.testing.assert_array_equal(traj.extras["value"][t], expected["value"], err_msg=f"value at {n}")
            np.testing.assert_array_equal(env.actions[n], expected["action"])
            done = expected["terminated"] | expected["truncated"]
            for i in np.flatnonzero(done):  # an episode of env i ended: its whole return
                episode = n // LENGTHS[i]
                ended_return += sum(100 * i + 10 * episode + k for k in range(1, LENGTHS[i] + 1))
                ended_length += LENGTHS[i]
                ended += 1
        np.testing.assert_array_equal(item.episodes, [ended_return, ended_length, ended])
        assert set(item.timings) == {"env_wait_s", "inference_s", "param_wait_s", "queue_wait_s"}


INITIAL_COUNT = 99  # the counting agent's initial core state: any step that reads it was not reset


def counting_act(params, obs, key, core, start):
    """A recurrent policy whose core state counts the observations read in this episode:
    reset (to 0) where `start`, then incremented. Its value is the count."""
    core = jnp.where(start, 0, core) + 1
    return (core % 3).astype(jnp.int32), {"value": core.astype(jnp.float32), "log_prob": obs[:, 0]}, core


def test_actor_resets_a_recurrent_core_at_every_episode_start(monkeypatch):
    """The Sebulba actor with a recurrent agent on the numbered environment: at every step the
    core state read the observations of the current episode only (reset exactly at each
    episode's first observation, after truncations and terminations alike, never a step
    early or late), across rollout boundaries; `start` marks those first observations, and
    each trajectory carries the core state it began from (the initial one for the first)."""
    env = NumberedEnv()
    source = ParamSource(jax.devices()[0])
    source.publish(jnp.float32(VERSION), VERSION)
    mesh = parallel.make_mesh(jax.devices()[1:3], "learner")
    out: queue.Queue = queue.Queue(ROLLOUTS)
    agent = Agent(init=None, act=counting_act, update=None,
                  initial_core=lambda batch: jnp.full((batch,), INITIAL_COUNT, jnp.int32))
    actor = Actor(index=0, env_config=EnvConfig("CartPole-v1"), num_envs=4, seed=0, env_threads=1,
                  rollout_length=T, max_policy_lag=0, policy_step=make_policy_step(agent), params=source,
                  agent=agent, out=out, sharding=trajectory_sharding(mesh), num_rollouts=ROLLOUTS)
    monkeypatch.setattr(sebulba.actor, "make_host_env", lambda *args, **kwargs: env)
    actor.run(threading.Event())
    length = np.array(LENGTHS)
    for r in range(ROLLOUTS):
        traj = jax.device_get(out.get_nowait().trajectory)
        steps = r * T + np.arange(T)[:, None]  # global step n, [T, 1]
        k = steps % length  # observations of this episode before step n
        np.testing.assert_array_equal(traj.extras["value"], k + 1, err_msg=f"rollout {r}")
        np.testing.assert_array_equal(traj.start, k == 0, err_msg=f"rollout {r}")
        before = np.full(4, INITIAL_COUNT) if r == 0 else (r * T - 1) % length + 1
        np.testing.assert_array_equal(traj.core, before[None], err_msg=f"rollout {r}")


class MeasuredEnv(NumberedEnv):
    """NumberedEnv that measures itself, as a host env with a reward pool does."""

    def metrics(self) -> dict[str, float]:
        return {"steps_seen": float(len(self.actions)), "cache_hit_rate": 0.5}


def test_env_metrics_reach_the_metrics_rows(monkeypatch):
    """A host env's own `metrics()` (the prefix adders' reward pool: syntheses/s, cache hit
    rate, reward wait) travel with each rollout and appear, prefixed `env_`, in Sebulba's
    metrics rows as the latest rollout saw them; an env without `metrics()` adds nothing."""
    from podracer.runner import EpisodeStats
    from sebulba.learner import UpdateRecord
    from sebulba.metrics import MetricsReporter

    env = MeasuredEnv()
    monkeypatch.setattr(sebulba.actor, "make_host_env", lambda *args, **kwargs: env)
    source = ParamSource(jax.devices()[0])
    source.publish(jnp.float32(VERSION), VERSION)
    out: queue.Queue = queue.Queue(2)
    agent = Agent(init=None, act=act, update=None)
    actor = Actor(index=0, env_config=EnvConfig("CartPole-v1"), num_envs=4, seed=0, env_threads=1,
                  rollout_length=T, max_policy_lag=0, policy_step=make_policy_step(agent), params=source,
                  agent=agent, out=out,
                  sharding=trajectory_sharding(parallel.make_mesh(jax.devices()[:1], "learner")), num_rollouts=2)
    actor.run(threading.Event())
    items = [out.get_nowait() for _ in range(2)]
    assert [item.env_metrics["steps_seen"] for item in items] == [T, 2 * T]

    rows = []
    reporter = MetricsReporter(steps_per_update=20, updates_per_log=2, num_updates=2, emit=rows.append)
    for update, item in enumerate(items, 1):
        reporter(UpdateRecord(update, {"loss": np.zeros(())}, [item], [0], 0.0, 0.0, 0, EpisodeStats.host_zeros()))
    assert rows[0]["env_steps_seen"] == 2 * T and rows[0]["env_cache_hit_rate"] == 0.5

    plain = items[1]._replace(env_metrics={})
    reporter(UpdateRecord(2, {"loss": np.zeros(())}, [plain], [0], 0.0, 0.0, 0, EpisodeStats.host_zeros()))
    assert not any(name.startswith("env_") and name != "env_steps" for name in rows[-1])


class PoisonedEnv(NumberedEnv):
    """NumberedEnv whose env 2 returns NaN in `field` on step `at` (1-based over the run;
    "reset" poisons its observation after the reset that follows that step)."""

    def __init__(self, field: str, at: int) -> None:
        super().__init__()
        self.field, self.at, self.steps = field, at, 0

    def recv(self) -> HostStep:
        step = super().recv()
        self.steps += 1
        if self.steps != self.at:
            return step
        ts = step.timestep
        obs, reward, final_obs = ts.obs.copy(), ts.reward.copy(), ts.final_obs.copy()
        {"reward": reward, "final_obs": final_obs, "reset": obs}[self.field][2] = np.nan
        return step._replace(timestep=ts._replace(obs=obs, reward=reward, final_obs=final_obs))


@pytest.mark.parametrize("field, at, what", [("reward", 7, "reward at step 7"),
                                             ("final_obs", 4, "observation at step 4"),
                                             ("reset", 8, "observation at step 8"),
                                             ("reward", 10, "reward at step 10")])
def test_a_non_finite_reward_or_observation_stops_the_actor_naming_the_environment(monkeypatch, field, at, what):
    """A host environment that returns NaN (a reward, an observation an episode ended in,
    or the first one of the next episode) stops its actor with a `NonFiniteError` naming
    the environment and the step, and the trajectory holding it never reaches the learner:
    learned from, it would show as a non-finite loss (an algorithm's divergence), and in a
    replay buffer it would be saved by every checkpoint before that (so a resume fails again)."""
    from podracer.runner import NonFiniteError

    env = PoisonedEnv(field, at)  # env 2 ends its episodes after 4, 8, ... steps: obs is then a reset one
    monkeypatch.setattr(sebulba.actor, "make_host_env", lambda *args, **kwargs: env)
    source = ParamSource(jax.devices()[0])
    source.publish(jnp.float32(VERSION), VERSION)
    out: queue.Queue = queue.Queue(ROLLOUTS)
    agent = Agent(init=None, act=act, update=None)
    actor = Actor(index=1, env_config=EnvConfig("CartPole-v1"), num_envs=4, seed=0, env_threads=1,
                  rollout_length=T, max_policy_lag=0, policy_step=make_policy_step(agent), params=source,
                  agent=agent, out=out,
                  sharding=trajectory_sharding(parallel.make_mesh(jax.devices()[:1], "learner")),
                  num_rollouts=ROLLOUTS)
    with pytest.raises(NonFiniteError, match=f"CartPole-v1 returned a non-finite {what} of its environment 2 "
                                             r"\(actor thread 1\)"):
        actor.run(threading.Event())
    assert env.closed and out.qsize() == (at - 1) // T  # the rollouts before the poisoned one
