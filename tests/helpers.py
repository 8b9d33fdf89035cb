"""Shared test helpers: random trajectories and small configs."""

import functools

import jax
import jax.numpy as jnp

from podracer.types import Agent, Trajectory


def random_trajectory(agent: Agent, params, key, T: int, B: int, obs_dim: int, num_actions: int) -> Trajectory:
    """A `[T, B]` trajectory with episode ends of both kinds, extras from `agent.act`.
    Jitted: eagerly, each of its ops would compile on its own."""
    return _random_trajectory(agent.act, params, key, T, B, obs_dim)


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5))
def _random_trajectory(act, params, key, T: int, B: int, obs_dim: int) -> Trajectory:
    keys = jax.random.split(key, 6)
    obs = jax.random.normal(keys[0], (T, B, obs_dim))
    next_obs = jax.random.normal(keys[1], (T, B, obs_dim))
    action, extras = jax.vmap(act, in_axes=(None, 0, 0))(params, obs, jax.random.split(keys[2], T))
    reward = jax.random.normal(keys[3], (T, B))
    terminated = jax.random.bernoulli(keys[4], 0.1, (T, B))
    truncated = jax.random.bernoulli(keys[5], 0.05, (T, B)) & ~terminated
    return Trajectory(obs, action, reward, terminated, truncated, next_obs, extras)


def tree_allclose(a, b, rtol=1e-5, atol=1e-6) -> None:
    import numpy as np

    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def leading_axis(x):
    return jnp.expand_dims(x, 0)


def nan_loss_at(make_update_step, call: int, failed_at: list | None = None):
    """A stand-in for `sebulba.learner.make_update_step` whose `call`-th update reports a
    NaN loss (appending the time to `failed_at`): for NaN-guard tests."""
    import time

    import numpy as np

    def poisoned(agent, mesh):
        update_step, calls = make_update_step(agent, mesh), []

        def step(state, trajectories, keys):
            state, metrics = update_step(state, trajectories, keys)
            calls.append(1)
            if len(calls) == call:
                if failed_at is not None:
                    failed_at.append(time.monotonic())
                metrics = {**metrics, "loss": np.float32(np.nan)}
            return state, metrics

        return step

    return poisoned
