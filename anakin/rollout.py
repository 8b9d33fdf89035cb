"""Acting in JAX environments: `lax.scan` over time of (act, batched env step).

Algorithm-agnostic: it calls the agent's `act` (through `Agent.step`) and records what the
agent returned. A recurrent agent's core state and episode-start flags ride in the
`EnvCarry` next to the environments they belong to, from step to step and from one
rollout to the next (and so into checkpoints).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from podracer.envs import JaxEnv
from podracer.envs.base import step_batch
from podracer.runner.episodes import EpisodeStats
from podracer.types import Agent, Array, Params, PRNGKey, Trajectory


class EnvCarry(NamedTuple):
    """The part of the training state that belongs to the environments, `[B, ...]`: their
    states and observations, and for a recurrent agent the core state after the last step
    and `start`, True where `obs` begins an episode (None for a feed-forward agent)."""

    env_state: Any
    obs: Array
    core: Any = None
    start: Array | None = None


def reset_envs(env: JaxEnv, env_params: Any, key: PRNGKey, num_envs: int, agent: Agent | None = None) -> EnvCarry:
    """Fresh environments, and `agent`'s initial acting state for them if it is recurrent."""
    reset = jax.vmap(env.reset, in_axes=(0, None))
    env_state, obs = reset(jax.random.split(key, num_envs), env_params)
    core, start = (None, None) if agent is None else agent.initial_acting_state(num_envs)
    return EnvCarry(env_state, obs, core, start)


def step_keys(key: PRNGKey, length: int, num_envs: int) -> tuple[PRNGKey, PRNGKey]:
    """The keys of a rollout's steps, `(act [T], env [T, B])`, drawn before the loop in one
    split: `keys = split(key, T * (B + 1)).reshape(T, B + 1)`, step `t` acting with
    `keys[t, 0]` and stepping environment `b` with `keys[t, 1 + b]`. On CPU every threefry
    split is a loop of its own, to trace, lower and compile; one batched split is the
    cheapest (measured in `podracer bench anakin`)."""
    keys = jax.random.split(key, length * (num_envs + 1)).reshape(length, num_envs + 1)
    return keys[:, 0], keys[:, 1:]


def rollout(
    env: JaxEnv,
    env_params: Any,
    agent: Agent,
    params: Params,
    carry: EnvCarry,
    key: PRNGKey,
    length: int,
) -> tuple[EnvCarry, Trajectory, EpisodeStats]:
    """Run `length` steps of a batch of environments: a `[T, B, ...]` trajectory (for a
    recurrent agent with `start` and the sequence's first core state, `Trajectory.core`)."""
    num_envs = jax.tree.leaves(carry.obs)[0].shape[0]

    def step(carry, keys):
        act_key, env_keys = keys
        action, extras, core = agent.step(params, carry.obs, act_key, carry.core, carry.start)
        env_state, ts = step_batch(env, env_keys, carry.env_state, action, env_params)
        done = ts.terminated | ts.truncated
        stats = EpisodeStats.ended(done, ts.episode_return, ts.episode_length)
        transition = Trajectory(
            obs=carry.obs, action=action, reward=ts.reward, terminated=ts.terminated,
            truncated=ts.truncated, next_obs=ts.final_obs, extras=extras, start=carry.start,
        )
        return EnvCarry(env_state, ts.obs, core, done if agent.recurrent else None), (transition, stats)

    first_core = jax.tree.map(lambda x: x[None], carry.core)
    carry, (traj, stats) = jax.lax.scan(step, carry, step_keys(key, length, num_envs))
    return carry, traj._replace(core=first_core), jax.tree.map(jnp.sum, stats)
