"""Third-party JAX environment code compiles under Anakin unmodified.

Environment libraries (navix, Jumanji, Craftax, XLand-MiniGrid, gymnax) are written without
knowing about `shard_map`. Their common patterns: a `lax.cond`/`lax.switch` with a constant
in one branch and a piece of the state in the other, PRNG keys chosen across branches, a
`while_loop` that starts from constants and carries state. Each must compile and run inside
Anakin's program on 1 and 4 devices, with one seed and with several.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import podracer
from podracer.envs import JaxEnv, register_jax_env
from podracer.types import DiscreteSpec, ObsSpec


@struct.dataclass
class PatternState:
    position: jax.Array  # uint8 [], as grid libraries keep it
    key: jax.Array  # a PRNG key carried in the state (Craftax, XLand-MiniGrid)
    counter: jax.Array


def _constant_key(like):
    """A key built from a constant, of the same kind (typed or raw) as `like`."""
    typed = jnp.issubdtype(like.dtype, jax.dtypes.prng_key)
    return jax.random.key(3) if typed else jax.random.PRNGKey(3)


class Patterns(JaxEnv):
    """A walk on 0..4 (+1 at 4, terminated) whose step exercises every pattern at once."""

    name = "Patterns"

    def reset_env(self, key, params):
        state = PatternState(jnp.zeros((), jnp.uint8), key, jnp.zeros((), jnp.int32))
        return state, self._obs(state)

    def step_env(self, key, state, action, params):
        moved = jnp.clip(state.position.astype(jnp.int32) + 2 * action - 1, 0, 4).astype(jnp.uint8)
        # a constant in one branch, the state in the other
        position = jax.lax.cond(action >= 0, lambda: moved, lambda: jnp.uint8(0))
        # a switch whose branches mix constants and state
        bonus = jax.lax.switch(action, [lambda: jnp.float32(0.0), lambda: moved.astype(jnp.float32) * 0.0])
        # a key chosen across branches: the state's one or a fresh constant one
        carried = jax.lax.cond(state.counter % 2 == 0, lambda: jax.random.split(state.key)[0],
                               lambda: _constant_key(state.key))
        fresh = jax.lax.cond(state.counter > 1000, lambda: _constant_key(key), lambda: key)
        noise = jax.random.uniform(fresh) * 0.0
        # a loop started from constants that carries state
        _, counter = jax.lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] + 1), (0, state.counter))
        state = PatternState(position, carried, counter)
        terminated = position == 4
        reward = jnp.where(terminated, 1.0, 0.0) + bonus + noise
        return state, self._obs(state), reward, terminated

    def _obs(self, state):
        return jax.nn.one_hot(state.position, 5)

    def max_episode_steps(self, params):
        return 20

    def observation_spec(self, params):
        return ObsSpec((5,), np.dtype(np.float32))

    def action_spec(self, params):
        return DiscreteSpec(2)


register_jax_env("ThirdPartyPatterns-v0", Patterns, overwrite=True)


@pytest.mark.parametrize("devices,seeds", [(1, 1), (4, 1), (4, 2)])
@pytest.mark.costly
def test_third_party_patterns_compile_and_run_under_anakin(devices, seeds, tmp_path):
    config = podracer.presets.get(
        "ppo-cartpole-anakin", env=dict(id="ThirdPartyPatterns-v0"), total_env_steps=256, run_dir=str(tmp_path / "run"),
        arch=dict(num_envs=8, rollout_length=8, updates_per_call=2, num_seeds=seeds, devices=tuple(range(devices))),
        agent=dict(hidden_sizes=(8,), num_minibatches=2), log=dict(console=False, tensorboard=False))
    result = podracer.train(config, console=False)
    assert result.metrics[-1]["env_steps"] == 256
    assert all(np.isfinite(row["loss"]) for row in result.metrics if "loss" in row)


class ElementwiseEq:
    """A state leaf container whose `==` is elementwise and whose truth value raises, as
    navix's `Event` is: the setup check must never call it."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        raise ValueError("setting an array element with a sequence")

    __hash__ = None


jax.tree_util.register_pytree_node(ElementwiseEq, lambda e: ((e.value,), None), lambda _, xs: ElementwiseEq(*xs))


class WithOddEquality(Patterns):
    def reset_env(self, key, params):
        state, obs = super().reset_env(key, params)
        return (state, ElementwiseEq(jnp.zeros(3))), obs

    def step_env(self, key, state, action, params):
        inner, odd = state
        inner, obs, reward, terminated = super().step_env(key, inner, action, params)
        return (inner, ElementwiseEq(odd.value + 1)), obs, reward, terminated


class BrokenStep(Patterns):
    def step_env(self, key, state, action, params):
        return super().step_env(key, state, action, params)[:2] + (jnp.zeros(3) @ jnp.zeros(4), False)


def _config(env_id, tmp_path):
    return podracer.presets.get(
        "ppo-cartpole-anakin", env=dict(id=env_id), total_env_steps=64, run_dir=str(tmp_path / "run"),
        arch=dict(num_envs=4, rollout_length=8, updates_per_call=1, devices=(0,)),
        agent=dict(hidden_sizes=(8,), num_minibatches=1), log=dict(console=False, tensorboard=False))


@pytest.mark.costly
def test_setup_compares_states_by_structure_never_by_the_library_equality(tmp_path):
    register_jax_env("ThirdPartyOddEquality-v0", WithOddEquality, overwrite=True)
    result = podracer.train(_config("ThirdPartyOddEquality-v0", tmp_path), console=False)
    assert result.metrics[-1]["env_steps"] == 64


def test_an_environment_that_fails_to_trace_is_one_config_error_naming_the_id(tmp_path):
    register_jax_env("ThirdPartyBroken-v0", BrokenStep, overwrite=True)
    with pytest.raises(podracer.config.ConfigError) as info:
        podracer.train(_config("ThirdPartyBroken-v0", tmp_path), console=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("env.id 'ThirdPartyBroken-v0': BrokenStep") and "failed when traced" in message
    assert not (tmp_path / "run").exists()
