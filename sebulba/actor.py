"""Actor threads: step a batch of host environments with the latest parameters and hand
each `[T, B, ...]` trajectory, already sharded over the learner mesh, to the learner.

Algorithm-agnostic: an actor calls `agent.act` and records what it returned. Per step
only the action comes to the host (for the environments); the agent's `extras` stay on
the actor device and are stacked there at the end of the rollout.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from podracer.config import EnvConfig
from podracer.envs.host import HostEnv, HostStep, env_metrics, make_host_env
from podracer.parallel import put_process_batch
from podracer.runner.episodes import EpisodeStats
from podracer.types import ActFn, Array, Params, PRNGKey, Trajectory
from sebulba.params import ParamSource
from sebulba.threads import Stopped, put

PolicyStep = Callable[[Params, Array, PRNGKey], tuple[Array, dict[str, Array], PRNGKey]]


class RolloutItem(NamedTuple):
    """What an actor thread hands to the learner.

    trajectory: `[T, B, ...]`, sharded over the learner devices along the batch axis.
    version:    version of the parameters that chose the actions (updates applied).
    episodes:   the episodes that ended (float64 sums and count, on the host).
    timings:    seconds spent on this rollout waiting for the envs (`env_wait_s`), on
                inference (`inference_s`), for parameters (`param_wait_s`), and putting the
                previous rollout into the queue (`queue_wait_s`).
    started:    `time.perf_counter()` when its first env step began (metrics count its
                steps from then on, never from when the learner got round to it).
    env_metrics: what the host environment measures itself after this rollout
                (`podracer.envs.host.env_metrics`; e.g. a reward pool's syntheses/s), or {}.
    """

    trajectory: Trajectory
    version: int
    episodes: EpisodeStats
    timings: dict[str, float]
    started: float
    env_metrics: dict[str, float] = {}  # noqa: RUF012 (a NamedTuple default, never mutated)


class Rollout(NamedTuple):
    trajectory: Trajectory  # NumPy, `[T, B, ...]`
    obs: Any  # observations to act on next, `[B, ...]` (an array, or a pytree such as MaskedObs)
    key: PRNGKey
    episodes: EpisodeStats
    env_wait_s: float
    inference_s: float


def make_policy_step(act: ActFn) -> PolicyStep:
    """`(params, obs [B, ...], key) -> (action [B], extras, next key)`, jitted; it runs on the
    device that holds `params` and `key`."""

    def policy_step(params: Params, obs: Array, key: PRNGKey):
        key, act_key = jax.random.split(key)
        action, extras = act(params, obs, act_key)
        return action, extras, key

    return jax.jit(policy_step)


def collect_rollout(
    env: HostEnv, policy_step: PolicyStep, params: Params, obs: Any, key: PRNGKey,
    length: int, stop: threading.Event,
) -> Rollout:
    """`length` steps of every environment of `env`, acting with `params`."""
    buffers: dict[str, Any] | None = None
    extras_per_step: list[dict[str, Array]] = []  # left on the device until the end
    episodes = EpisodeStats.host_zeros()
    env_wait = inference = 0.0
    for t in range(length):
        if stop.is_set():
            raise Stopped
        start = time.perf_counter()
        action, extras, key = policy_step(params, obs, key)
        action = np.asarray(action)  # the only device-to-host transfer of a step
        sent = time.perf_counter()
        env.send(action)
        if buffers is None:
            buffers = _allocate(length, obs, action)
        _write(buffers["obs"], t, obs)
        buffers["action"][t] = action
        extras_per_step.append(extras)
        written = time.perf_counter()
        step = env.recv()
        env_wait += time.perf_counter() - written
        inference += sent - start
        _write_outcome(buffers, t, step)
        episodes += EpisodeStats.host_ended(step.episode_end, step.timestep.episode_return,
                                            step.timestep.episode_length)
        obs = step.timestep.obs
    buffers["extras"] = _stack_steps(extras_per_step)
    return Rollout(_trajectory(buffers), obs, key, episodes, env_wait, inference)


@jax.jit
def _stack_steps(per_step: list[dict[str, Array]]) -> dict[str, Array]:
    """`T` pytrees of `[B, ...]` arrays to one of `[T, B, ...]`, on their device."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *per_step)


def _allocate(length: int, obs: Any, action: np.ndarray) -> dict[str, Any]:
    """Fresh `[T, ...]` host buffers (never reused: the learner may still read the last ones).
    Observations may be pytrees (`MaskedObs`): a buffer per leaf. Actions are `[B]`
    (discrete) or `[B, *shape]` (continuous)."""
    batch = action.shape[:1]
    empty_like = lambda x: np.empty((length,) + np.shape(x), np.asarray(x).dtype)  # noqa: E731
    return {
        "obs": jax.tree.map(empty_like, obs),
        "next_obs": jax.tree.map(empty_like, obs),
        "action": np.empty((length,) + action.shape, action.dtype),
        "reward": np.empty((length,) + batch, np.float32),
        "terminated": np.empty((length,) + batch, bool),
        "truncated": np.empty((length,) + batch, bool),
    }


def _write_outcome(buffers: dict[str, Any], t: int, step: HostStep) -> None:
    ts = step.timestep
    buffers["reward"][t] = ts.reward
    buffers["terminated"][t] = ts.terminated
    buffers["truncated"][t] = ts.truncated
    _write(buffers["next_obs"], t, ts.final_obs)


def _write(buffer: Any, t: int, value: Any) -> None:
    """`buffer[t] = value` for every leaf of an observation pytree."""
    jax.tree.map(lambda b, v: b.__setitem__(t, v), buffer, value)


def _trajectory(buffers: dict[str, Any]) -> Trajectory:
    return Trajectory(
        obs=buffers["obs"], action=buffers["action"], reward=buffers["reward"],
        terminated=buffers["terminated"], truncated=buffers["truncated"],
        next_obs=buffers["next_obs"], extras=buffers["extras"],
    )


@dataclasses.dataclass
class Actor:
    """One actor thread's settings; `run` is the thread's body."""

    index: int
    env_config: EnvConfig
    num_envs: int
    seed: int
    env_threads: int
    rollout_length: int
    max_policy_lag: int
    policy_step: PolicyStep
    params: ParamSource
    out: queue.Queue
    sharding: NamedSharding  # where trajectories go: the learner mesh, batch axis
    num_rollouts: int | None  # None: until stopped
    first_version: int = 0  # parameter version published first (updates applied before a resume)

    def run(self, stop: threading.Event) -> None:
        env = make_host_env(self.env_config, self.num_envs, self.seed, self.env_threads)
        try:
            self._loop(env, stop)
        finally:
            env.close()

    def _loop(self, env: HostEnv, stop: threading.Event) -> None:
        obs = env.reset()
        key = jax.device_put(jax.random.key(self.seed), self.params.device)
        queue_wait = 0.0
        rollouts = itertools.count() if self.num_rollouts is None else range(self.num_rollouts)
        for i in rollouts:
            params, version, param_wait = self.params.latest(self.first_version + i - self.max_policy_lag, stop)
            started = time.perf_counter()
            rollout = collect_rollout(env, self.policy_step, params, obs, key, self.rollout_length, stop)
            obs, key = rollout.obs, rollout.key
            timings = {"env_wait_s": rollout.env_wait_s, "inference_s": rollout.inference_s,
                       "param_wait_s": param_wait, "queue_wait_s": queue_wait}
            # With several processes this is this process's part of one global batch.
            trajectory = put_process_batch(rollout.trajectory, self.sharding)
            item = RolloutItem(trajectory, version, rollout.episodes, timings, started, env_metrics(env))
            queue_wait = put(self.out, item, stop)
