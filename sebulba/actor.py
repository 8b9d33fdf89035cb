"""Actor threads: step a batch of host environments with the latest parameters and hand
each `[T, B, ...]` trajectory, already sharded over the learner mesh, to the learner.

Algorithm-agnostic: an actor calls the agent's `act` (through `Agent.step`) and records what
it returned. Per step only the action comes to the host (for the environments); the agent's
`extras` stay on the actor device and are stacked there at the end of the rollout. A
recurrent agent's core state also stays on the actor device: each actor carries the state
of its own environments from rollout to rollout, resets it per environment where an
episode ended (the `start` flags, kept on the host), and sends each trajectory with the
state it started from (`Trajectory.core`), whatever parameters the next rollout acts with.
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
from podracer.runner.guard import NonFiniteError
from podracer.types import Agent, Array, CoreState, Params, PRNGKey, Trajectory
from sebulba.params import ParamSource
from sebulba.threads import Stopped, put

PolicyStep = Callable[[Params, Array, PRNGKey, CoreState, Array | None],
                      tuple[Array, dict[str, Array], CoreState, PRNGKey]]


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
                (`podracer.envs.host.env_metrics`; e.g. a reward pool's rewards computed per second), or {}.
    """

    trajectory: Trajectory
    version: int
    episodes: EpisodeStats
    timings: dict[str, float]
    started: float
    env_metrics: dict[str, float] = {}  # noqa: RUF012 (a NamedTuple default, never mutated)


class ActingState(NamedTuple):
    """What an actor carries from one step (and rollout) to the next."""

    obs: Any  # observations to act on next, `[B, ...]` (an array, or a pytree such as MaskedObs)
    key: PRNGKey  # on the actor device
    core: CoreState = None  # a recurrent agent's core state `[B, ...]`, on the actor device
    start: np.ndarray | None = None  # recurrent: `bool [B]`, `obs` begins an episode


class Rollout(NamedTuple):
    trajectory: Trajectory  # NumPy, `[T, B, ...]` (extras and core on the actor device)
    state: ActingState
    episodes: EpisodeStats
    env_wait_s: float
    inference_s: float


def make_policy_step(agent: Agent) -> PolicyStep:
    """`(params, obs [B, ...], key, core, start) -> (action [B], extras, core, next key)`,
    jitted; it runs on the device that holds `params` and `key` (`core` and `start` are
    None for a feed-forward agent)."""

    def policy_step(params: Params, obs: Array, key: PRNGKey, core: CoreState, start: Array | None):
        key, act_key = jax.random.split(key)
        action, extras, core = agent.step(params, obs, act_key, core, start)
        return action, extras, core, key

    return jax.jit(policy_step)


def initial_acting_state(agent: Agent, obs: Any, key: PRNGKey, device: Any) -> ActingState:
    """An actor's state after resetting its environments: `agent`'s initial core state on
    `device`, every `start` True (None for a feed-forward agent)."""
    core, start = agent.initial_acting_state(jax.tree.leaves(obs)[0].shape[0])
    if core is None:
        return ActingState(obs, key)
    return ActingState(obs, key, jax.device_put(core, device), np.asarray(start))


def collect_rollout(
    env: HostEnv, policy_step: PolicyStep, params: Params, state: ActingState,
    length: int, stop: threading.Event,
) -> Rollout:
    """`length` steps of every environment of `env`, acting with `params` from `state`."""
    buffers: dict[str, Any] | None = None
    extras_per_step: list[dict[str, Array]] = []  # left on the device until the end
    episodes = EpisodeStats.host_zeros()
    env_wait = inference = 0.0
    obs, key, core, start = state
    first_core = core
    for t in range(length):
        if stop.is_set():
            raise Stopped
        began = time.perf_counter()
        action, extras, core, key = policy_step(params, obs, key, core, start)
        action = np.asarray(action)  # the only device-to-host transfer of a step
        sent = time.perf_counter()
        env.send(action)
        if buffers is None:
            buffers = _allocate(length, obs, action, start is not None)
        _write(buffers["obs"], t, obs)
        buffers["action"][t] = action
        if start is not None:
            buffers["start"][t] = start
        extras_per_step.append(extras)
        written = time.perf_counter()
        step = env.recv()
        env_wait += time.perf_counter() - written
        inference += sent - began
        _write_outcome(buffers, t, step)
        episodes += EpisodeStats.host_ended(step.episode_end, step.timestep.episode_return,
                                            step.timestep.episode_length)
        obs = step.timestep.obs
        if start is not None:  # the learner's episodes (a lost life counts), as the learner reads them
            start = step.timestep.terminated | step.timestep.truncated
    buffers["extras"] = _stack_steps(extras_per_step)
    if first_core is not None:
        buffers["core"] = _time_axis(first_core)
    state = ActingState(obs, key, core, start)
    return Rollout(_trajectory(buffers), state, episodes, env_wait, inference)


def check_env_finite(trajectory: Trajectory, env_id: str, thread: int, steps_before: int) -> None:
    """Raise `NonFiniteError` naming the first non-finite reward or (floating) observation
    the host environment returned in `trajectory` `[T, B, ...]`, which follows
    `steps_before` steps of this actor's environments. Caught here, before the learner sees
    it, it is named as the environment's; past this point it would surface as a non-finite
    loss, or sit in a replay buffer that every later checkpoint saves."""
    # Each `[T, B]` flag with the step that returned it (step 0 is the reset): obs[t] came
    # from step t, next_obs[t] and reward[t] from step t + 1.
    found = [(_non_finite(trajectory.obs), 0, "observation"), (_non_finite(trajectory.next_obs), 1, "observation"),
             (_non_finite(trajectory.reward), 1, "reward")]
    firsts = [(int(t) + offset, int(b), what) for bad, offset, what in found if bad.any()
              for t, b in np.argwhere(bad)[:1]]
    if firsts:
        step, b, what = min(firsts)
        when = "on reset" if steps_before + step == 0 else f"at step {steps_before + step}"
        raise NonFiniteError(f"host environment {env_id} returned a non-finite {what} {when} of its environment "
                             f"{b} (actor thread {thread}); run stopped before learning from it")


def _non_finite(tree: Any) -> np.ndarray:
    """`bool [T, B]`: where a floating leaf of `tree` (`[T, B, ...]` leaves) is not finite."""
    leaves = [np.asarray(x) for x in jax.tree.leaves(tree)]
    shape = leaves[0].shape[:2]
    bad = np.zeros(shape, bool)
    for x in leaves:
        if np.issubdtype(x.dtype, np.inexact):
            bad |= ~np.isfinite(x).reshape(shape + (-1,)).all(-1)
    return bad


@jax.jit
def _time_axis(core: CoreState) -> CoreState:
    """`[B, ...] -> [1, B, ...]`, on its device (`Trajectory.core`)."""
    return jax.tree.map(lambda x: x[None], core)


@jax.jit
def _stack_steps(per_step: list[dict[str, Array]]) -> dict[str, Array]:
    """`T` pytrees of `[B, ...]` arrays to one of `[T, B, ...]`, on their device."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *per_step)


def _allocate(length: int, obs: Any, action: np.ndarray, recurrent: bool) -> dict[str, Any]:
    """Fresh `[T, ...]` host buffers (never reused: the learner may still read the last ones).
    Observations may be pytrees (`MaskedObs`): a buffer per leaf. Actions are `[B]`
    (discrete) or `[B, *shape]` (continuous); a recurrent agent's `start` flags are `[B]`."""
    batch = action.shape[:1]
    empty_like = lambda x: np.empty((length,) + np.shape(x), np.asarray(x).dtype)  # noqa: E731
    recurrent_buffers = {"start": np.empty((length,) + batch, bool)} if recurrent else {}
    return {
        **recurrent_buffers,
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
        next_obs=buffers["next_obs"], extras=buffers["extras"], start=buffers.get("start"),
        core=buffers.get("core"),
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
    agent: Agent  # for its initial core state (a recurrent agent)
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
        key = jax.device_put(jax.random.key(self.seed), self.params.device)
        state = initial_acting_state(self.agent, env.reset(), key, self.params.device)
        queue_wait = 0.0
        rollouts = itertools.count() if self.num_rollouts is None else range(self.num_rollouts)
        for i in rollouts:
            params, version, param_wait = self.params.latest(self.first_version + i - self.max_policy_lag, stop)
            started = time.perf_counter()
            rollout = collect_rollout(env, self.policy_step, params, state, self.rollout_length, stop)
            state = rollout.state
            check_env_finite(rollout.trajectory, self.env_config.id, self.index, i * self.rollout_length)
            timings = {"env_wait_s": rollout.env_wait_s, "inference_s": rollout.inference_s,
                       "param_wait_s": param_wait, "queue_wait_s": queue_wait}
            # With several processes this is this process's part of one global batch.
            trajectory = put_process_batch(rollout.trajectory, self.sharding)
            item = RolloutItem(trajectory, version, rollout.episodes, timings, started, env_metrics(env))
            queue_wait = put(self.out, item, stop)
