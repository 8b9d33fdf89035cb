"""Acting in JAX environments: `lax.scan` over time of (act, vmapped env step).

Algorithm-agnostic: it calls `agent.act` and records what the agent returned.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from podracer.envs import JaxEnv
from podracer.runner.episodes import EpisodeStats
from podracer.types import Array, Params, PRNGKey, Trajectory


class EnvCarry(NamedTuple):
    """The part of the training state that belongs to the environments, `[B, ...]`."""

    env_state: Any
    obs: Array


def reset_envs(env: JaxEnv, env_params: Any, key: PRNGKey, num_envs: int) -> EnvCarry:
    env_state, obs = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), env_params)
    return EnvCarry(env_state, obs)


def rollout(
    env: JaxEnv,
    env_params: Any,
    act: Callable[[Params, Array, PRNGKey], tuple[Array, dict]],
    params: Params,
    carry: EnvCarry,
    key: PRNGKey,
    length: int,
) -> tuple[EnvCarry, Trajectory, EpisodeStats]:
    """Run `length` steps of a batch of environments: a `[T, B, ...]` trajectory."""
    num_envs = jax.tree.leaves(carry.obs)[0].shape[0]
    step_env = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def step(carry, key):
        act_key, env_key = jax.random.split(key)
        action, extras = act(params, carry.obs, act_key)
        env_state, ts = step_env(jax.random.split(env_key, num_envs), carry.env_state, action, env_params)
        done = ts.terminated | ts.truncated
        stats = EpisodeStats.ended(done, ts.episode_return, ts.episode_length)
        transition = Trajectory(
            obs=carry.obs, action=action, reward=ts.reward, terminated=ts.terminated,
            truncated=ts.truncated, next_obs=ts.final_obs, extras=extras,
        )
        return EnvCarry(env_state, ts.obs), (transition, stats)

    carry, (traj, stats) = jax.lax.scan(step, carry, jax.random.split(key, length))
    return carry, traj, jax.tree.map(jnp.sum, stats)
