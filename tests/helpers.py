"""Shared test helpers: random trajectories and small configs."""

import jax
import jax.numpy as jnp

from podracer.types import Agent, Trajectory


def random_trajectory(agent: Agent, params, key, T: int, B: int, obs_dim: int, num_actions: int) -> Trajectory:
    """A `[T, B]` trajectory with episode ends of both kinds, extras from `agent.act`."""
    keys = jax.random.split(key, 6)
    obs = jax.random.normal(keys[0], (T, B, obs_dim))
    next_obs = jax.random.normal(keys[1], (T, B, obs_dim))
    action, extras = jax.vmap(agent.act, in_axes=(None, 0, 0))(params, obs, jax.random.split(keys[2], T))
    reward = jax.random.normal(keys[3], (T, B))
    terminated = jax.random.bernoulli(keys[4], 0.1, (T, B))
    truncated = jax.random.bernoulli(keys[5], 0.05, (T, B)) & ~terminated
    del num_actions
    return Trajectory(obs, action, reward, terminated, truncated, next_obs, extras)


def tree_allclose(a, b, rtol=1e-5, atol=1e-6) -> None:
    import numpy as np

    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def leading_axis(x):
    return jnp.expand_dims(x, 0)
